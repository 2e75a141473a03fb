"""How the gateway tells which episode a chat completion continues, and what its step holds."""

from __future__ import annotations

import json

import pytest

from safactory.agents.gateway.conversations import Conversations, steps_of

SYSTEM = {"role": "system", "content": "You help with the shop's inventory."}
ASK = {"role": "user", "content": "How many blue mugs are left?"}


def _tool_reply(*calls: tuple[str, dict]) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ],
    }


def test_a_call_that_extends_the_transcript_continues_its_episode() -> None:
    book = Conversations()
    first = book.resolve([SYSTEM, ASK])
    assert first.started and first.new_messages == [SYSTEM, ASK]
    reply = _tool_reply(("stock_lookup", {"sku": "MUG-BLUE"}))
    book.answered(first.conversation, [SYSTEM, ASK], reply)
    # the client echoes the reply in its own way (no null content, parts instead of a string)
    echoed = {k: v for k, v in reply.items() if v is not None}
    result = {"role": "tool", "tool_call_id": "c0", "content": [{"type": "text", "text": "12"}]}
    second = book.resolve([SYSTEM, ASK, echoed, result])
    assert second.conversation is first.conversation and not second.started
    assert second.new_messages == [result]


def test_the_same_opening_from_another_agent_is_another_episode() -> None:
    book = Conversations()
    a = book.resolve([SYSTEM, ASK])
    book.answered(a.conversation, [SYSTEM, ASK], {"role": "assistant", "content": "12 left."})
    b = book.resolve([SYSTEM, ASK])
    assert b.started and b.conversation is not a.conversation


def test_a_named_episode_wins_and_a_rewritten_history_is_all_new_input() -> None:
    book = Conversations()
    a = book.resolve([SYSTEM, ASK], episode_id="ep-shop-1")
    assert a.conversation.episode_id == "ep-shop-1"
    book.answered(a.conversation, [SYSTEM, ASK], {"role": "assistant", "content": "12 left."})
    edited = [SYSTEM, {"role": "user", "content": "How many red mugs are left?"}]
    again = book.resolve(edited, episode_id="ep-shop-1")
    assert again.conversation is a.conversation and again.new_messages == edited


def test_idle_and_closed_episodes() -> None:
    book = Conversations()
    a = book.resolve([ASK])
    assert book.idle(60, now=a.conversation.last_active + 61) == [a.conversation]
    assert book.close(a.conversation.episode_id) is a.conversation and len(book) == 0


def test_each_tool_call_is_a_step_and_only_the_first_carries_the_new_turns() -> None:
    book = Conversations()
    call = book.resolve([SYSTEM, ASK])
    reply = _tool_reply(("stock_lookup", {"sku": "MUG-BLUE"}), ("stock_lookup", {"sku": "MUG-RED"}))
    steps = steps_of(call, reply, [], 7, token_ids=[1, 2], logprobs=[-0.1, -0.2])
    assert [s.step_index for s in steps] == [0, 1]
    assert [len(s.messages) for s in steps] == [2, 0]
    assert [s.action.tool_call.function.arguments for s in steps] == [
        '{"sku": "MUG-BLUE"}',
        '{"sku": "MUG-RED"}',
    ]
    assert steps[0].token_ids == [1, 2] and steps[1].token_ids is None
    assert {s.policy_version for s in steps} == {7}


def test_a_message_that_is_not_chat_format_names_itself() -> None:
    book = Conversations()
    call = book.resolve([ASK, {"role": "robot", "content": "beep"}])
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        steps_of(call, {"role": "assistant", "content": "hi"}, [], 0)


def test_a_call_naming_an_ended_episode_starts_a_new_one() -> None:
    book = Conversations()
    a = book.resolve([ASK], episode_id="ep-mugs")
    book.close("ep-mugs")
    again = book.resolve([ASK], episode_id="ep-mugs")
    assert again.started and again.conversation.episode_id == "ep-mugs.1"
    assert a.conversation.episode_id == "ep-mugs"


def test_a_history_written_back_as_text_continues_by_the_call_ids_it_names() -> None:
    """A client that sends an earlier tool call back as text (with its id) and the tool's
    output as a user turn continues the episode; the new turns start after that text."""
    conversations = Conversations()
    task = [{"role": "user", "content": "Summarise notes.txt"}]
    first = conversations.resolve(task)
    call = {"id": "call_4f1c2a9e", "type": "function", "function": {"name": "read_file"}}
    call["function"]["arguments"] = '{"path": "notes.txt"}'
    conversations.answered(first.conversation, task, {"role": "assistant", "tool_calls": [call]})
    again = [
        *task,
        {"role": "assistant", "content": f"Calling tools:\n[{call!r}]"},
        {"role": "user", "content": "Observation:\nv2.1: faster sync"},
    ]
    second = conversations.resolve(again)
    assert second.conversation is first.conversation and not second.started
    assert second.new_messages == again[2:]
    stranger = [*task, {"role": "assistant", "content": "Calling tools:\n[{'id': 'call_other'}]"}]
    assert conversations.resolve(stranger).started
