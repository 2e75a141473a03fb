"""Small builders for audit tests: steps with a user task, tool calls and tool output."""

from __future__ import annotations

import json

from safactory.schemas import Action, ChatMessage, FunctionCall, Step, ToolCall


def make_step(
    index: int,
    *,
    episode: str = "ep-1",
    user: str | None = None,
    tool: str | None = None,
    args: dict | None = None,
    result: str | None = None,
    reply: str | None = None,
    thought: str | None = None,
) -> Step:
    """A step: optional user turn, then a tool call (with its output) or a text reply."""
    messages = []
    if user:
        messages.append(ChatMessage(role="user", content=user))
    messages.append(ChatMessage(role="assistant", content=thought))
    call = None
    if tool:
        call = ToolCall(
            id=f"c{index}", function=FunctionCall(name=tool, arguments=json.dumps(args or {}))
        )
    return Step(
        episode_id=episode,
        step_index=index,
        env="test",
        task_id="t",
        policy_version=0,
        action=Action(text=reply, tool_call=call),
        messages=messages,
        tool_result=result,
    )
