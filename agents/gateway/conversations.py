"""Chat-completion calls as episodes: which conversation a call continues, and its step.

An agent built elsewhere sends the whole conversation at every call. A call continues an
episode when it names it (the ``x-sf-episode`` header) or, without a header, when its
messages begin with everything the episode's last call sent and got back (the transcript,
compared by digest), or failing that when it names a tool call the episode was answered
with (clients that write the history back in their own words: calls as text, with their
ids); otherwise it starts a new episode. Each call becomes one step per
returned tool call (one step when the reply is text): the step's ``messages`` are the
turns the client added since the last call (the task at first, then tool results), its
action is the reply, so the auditor reads tool outputs where it reads them from our own
runner (role ``tool`` messages) and judges each call with the episode before it.

A call naming an episode that already ended here goes to a new one, ``<name>.<n>``: an ended
episode's steps are final, and its step indices are never reused.

Nothing here does I/O: :mod:`.app` forwards, guards and publishes.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...schemas import Action, ChatMessage, FunctionCall, Step, ToolCall, ToolSchema

EPISODE_HEADER = "x-sf-episode"
"""Request header naming the episode a call belongs to (the gateway returns it too)."""
ENV_HEADER = "x-sf-env"
TASK_HEADER = "x-sf-task"
DEFAULT_ENV = "gateway"
CONTEXT_STEPS = 32
"""Steps of an open episode kept as the audit context of its next call (the live auditor's
own default)."""
CONTEXT_BYTES = 4 << 20
"""Most memory one open episode's context holds (:func:`step_bytes`); older steps go first."""
OPEN_BYTES = 256 << 20
"""Most memory all open episodes' contexts hold; the least recently active go first."""
MESSAGE_BYTES = 512
"""What a message costs in memory beside its text (an empty one measured 490 bytes): an
episode of many empty messages is bounded like one of long ones."""
CALL_BYTES = 1536
"""What a tool call costs in memory beside its arguments (measured: 1,510 bytes)."""


def _canonical(message: dict[str, Any]) -> bytes:
    """A message reduced to what makes it the same turn when a client sends it back
    (clients drop ``null`` fields, add ``type: function``, send content as parts, or
    re-serialise a call's arguments)."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    calls = [
        (
            c.get("id"),
            (c.get("function") or {}).get("name"),
            _arguments((c.get("function") or {}).get("arguments")),
        )
        for c in message.get("tool_calls") or []
        if isinstance(c, dict)
    ]
    turn = [message.get("role"), content or "", calls, message.get("tool_call_id")]
    return json.dumps(turn, sort_keys=True, ensure_ascii=False).encode()


def _arguments(arguments: Any) -> Any:
    """Tool-call arguments as the same JSON however a client spaced or ordered them (the
    Messages API sends them back as an object, re-serialised)."""
    try:
        return json.dumps(json.loads(arguments), sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return arguments


_NAMED_ID = re.compile(r"""["']id["']\s*:\s*["']([^"'\s]{4,200})["']""")
"""A call id as a client writes a tool call into text (``{'id': 'call_…', …}``)."""


def _call_ids(message: dict[str, Any]) -> list[str]:
    """The tool-call ids a message names: its calls, the call it answers, and ids written
    into its text."""
    ids = [c["id"] for c in message.get("tool_calls") or [] if isinstance(c, dict) and c.get("id")]
    if isinstance(message.get("tool_call_id"), str):
        ids.append(message["tool_call_id"])
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    if isinstance(content, str) and "id" in content:
        ids += _NAMED_ID.findall(content)
    return [str(i) for i in ids]


def prefix_digests(messages: list[dict[str, Any]]) -> list[str]:
    """The digest of every prefix of ``messages``: ``[i]`` covers ``messages[: i + 1]``."""
    running = hashlib.sha256()
    out = []
    for message in messages:
        running.update(_canonical(message))
        running.update(b"\x00")
        out.append(running.copy().hexdigest())
    return out


@dataclass
class Conversation:
    """One episode seen through the gateway."""

    episode_id: str
    env: str
    task_id: str
    steps: list[Step] = field(default_factory=list)
    """The latest steps published (the audit context of the next call), at most
    :data:`CONTEXT_STEPS` of them within :data:`CONTEXT_BYTES`."""
    step_count: int = 0
    """Steps published so far (the next step's index)."""
    nbytes: int = 0
    """Memory held by :attr:`steps` (:func:`step_bytes`)."""
    sent: int = 0
    """Messages of the transcript so far (what the client sent plus the replies)."""
    digest: str | None = None
    """Digest of the transcript so far."""
    tools: list[dict[str, Any]] | None = None
    """The tools offered at the last call (a step records them when they change)."""
    last_active: float = field(default_factory=time.monotonic)
    started: bool = False
    policy_version: int | None = None
    """Oldest version that wrote a reply in this episode."""
    call_ids: list[str] = field(default_factory=list)
    """Ids of the latest tool calls it was answered with (a transcript naming one
    continues it)."""


@dataclass(frozen=True)
class Call:
    """One chat completion as the gateway resolved it."""

    conversation: Conversation
    new_messages: list[dict[str, Any]]
    """The turns the client added since the episode's last call."""
    started: bool
    """The call starts its episode."""


def step_bytes(step: Step) -> int:
    """The memory ``step`` holds, counted in bytes: its text, and a fixed cost per message
    and per tool call (the objects themselves)."""
    total = MESSAGE_BYTES + len(step.tool_result or "") + len(step.action.text or "")
    for message in step.messages:
        total += MESSAGE_BYTES + len(str(message.content or ""))
        for call in message.tool_calls or ():
            total += CALL_BYTES + len(call.function.arguments or "")
    return total


class Conversations:
    """Open episodes, found by header or by transcript; the least recently used go first
    once ``capacity`` are open or their context passes ``max_bytes``."""

    def __init__(self, capacity: int = 10_000, max_bytes: int = OPEN_BYTES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.nbytes = 0
        """Memory held by every open episode's context (:func:`step_bytes`)."""
        self._let_go: list[Conversation] = []
        """Episodes closed to stay within bounds, their ends not yet published."""
        self._open: OrderedDict[str, Conversation] = OrderedDict()
        self._by_digest: dict[str, str] = {}
        self._by_call: dict[str, str] = {}
        """Ids of the tool calls open episodes were answered with → their episode."""
        self._ended: OrderedDict[str, int] = OrderedDict()
        """Named episodes that ended here → how many times the name was reused since."""

    def __len__(self) -> int:
        return len(self._open)

    def all(self) -> list[Conversation]:
        """Every open episode, least recently active first."""
        return list(self._open.values())

    def get(self, episode_id: str) -> Conversation | None:
        """The open episode ``episode_id``, if any."""
        return self._open.get(episode_id)

    def resolve(
        self,
        messages: list[dict[str, Any]],
        *,
        episode_id: str | None = None,
        env: str | None = None,
        task_id: str | None = None,
    ) -> Call:
        """The episode this call continues (or a new one), and its new turns."""
        digests = prefix_digests(messages)
        conversation = self._open.get(episode_id) if episode_id else None
        resumed_at: int | None = None
        if conversation is None and not episode_id:
            for i in range(len(digests) - 1, -1, -1):
                found = self._by_digest.get(digests[i])
                if found is not None and found in self._open:
                    conversation = self._open[found]
                    break
            else:
                conversation, resumed_at = self._naming_a_call(messages)
        started = conversation is None
        if conversation is None:
            episode = episode_id or f"gw-{uuid.uuid4().hex[:20]}"
            if episode in self._ended:  # an ended episode is never continued: a new one
                self._ended[episode] += 1
                episode = f"{episode}.{self._ended[episode]}"
            conversation = Conversation(
                episode, env or DEFAULT_ENV, task_id or f"{env or DEFAULT_ENV}-chat"
            )
            self._open[episode] = conversation
            self._bound()
        new_start = conversation.sent if resumed_at is None else resumed_at
        if resumed_at is None and (
            conversation.digest is not None
            and (new_start > len(digests) or digests[new_start - 1] != conversation.digest)
        ):
            new_start = 0  # the client rewrote the history: all of it is this call's input
        self._open.move_to_end(conversation.episode_id)
        conversation.last_active = time.monotonic()
        return Call(conversation, messages[new_start:], started)

    def _naming_a_call(self, messages: list[dict[str, Any]]) -> tuple[Conversation | None, int]:
        """The open episode whose tool call the latest message naming one names, and the
        index after that message (the new turns start there): for clients that send the
        history back in their own words (tool calls written as text, with their ids)."""
        for i in range(len(messages) - 1, -1, -1):
            for call_id in _call_ids(messages[i]):
                found = self._by_call.get(call_id)
                if found is not None and found in self._open:
                    return self._open[found], i + 1
        return None, 0

    def published(self, conversation: Conversation, steps: list[Step]) -> None:
        """Keep ``steps`` as the episode's context, within its bounds (and every open one's
        within :attr:`max_bytes`: see :meth:`let_go`)."""
        conversation.step_count += len(steps)
        conversation.steps.extend(steps)
        added = sum(step_bytes(s) for s in steps)
        conversation.nbytes += added
        self.nbytes += added
        while conversation.steps and (
            len(conversation.steps) > CONTEXT_STEPS or conversation.nbytes > CONTEXT_BYTES
        ):
            gone = step_bytes(conversation.steps.pop(0))
            conversation.nbytes -= gone
            self.nbytes -= gone
        self._bound()

    def let_go(self) -> list[Conversation]:
        """The episodes closed since the last call to stay within bounds (the least
        recently active first): the caller publishes their ends."""
        gone, self._let_go = self._let_go, []
        return gone

    def answered(
        self, conversation: Conversation, messages: list[dict[str, Any]], reply: dict[str, Any]
    ) -> None:
        """Record what the client sent and got back, so its next call is recognised."""
        transcript = [*messages, reply]
        if conversation.digest is not None:
            self._by_digest.pop(conversation.digest, None)
        conversation.digest = prefix_digests(transcript)[-1]
        conversation.sent = len(transcript)
        self._by_digest[conversation.digest] = conversation.episode_id
        for call_id in _call_ids(reply):
            self._by_call[call_id] = conversation.episode_id
            conversation.call_ids.append(call_id)
        while len(conversation.call_ids) > CONTEXT_STEPS:
            self._by_call.pop(conversation.call_ids.pop(0), None)

    def close(self, episode_id: str) -> Conversation | None:
        """Forget an episode (it ended); returns it."""
        conversation = self._open.pop(episode_id, None)
        if conversation is not None:
            self.nbytes -= conversation.nbytes
        if conversation is not None and conversation.digest is not None:
            self._by_digest.pop(conversation.digest, None)
        for call_id in conversation.call_ids if conversation is not None else ():
            self._by_call.pop(call_id, None)
        if conversation is not None:
            self._ended.setdefault(episode_id, 0)
            while len(self._ended) > self.capacity:
                self._ended.popitem(last=False)
        return conversation

    def idle(self, idle_s: float, now: float | None = None) -> list[Conversation]:
        """Open episodes with no call for ``idle_s`` seconds."""
        now = time.monotonic() if now is None else now
        return [c for c in self._open.values() if now - c.last_active >= idle_s]

    def _bound(self) -> None:
        while len(self._open) > self.capacity or (
            self.nbytes > self.max_bytes and len(self._open) > 1
        ):
            episode, _ = next(iter(self._open.items()))
            closed = self.close(episode)
            if closed is not None:
                self._let_go.append(closed)


def chat_messages(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """OpenAI chat messages as the step schema's turns (:class:`ValueError` naming the
    message that is not OpenAI chat format)."""
    out = []
    for i, message in enumerate(messages):
        try:
            out.append(ChatMessage.model_validate(_chat_fields(message)))
        except ValueError as exc:
            raise ValueError(f"messages[{i}] is not an OpenAI chat message: {exc}") from None
    return out


def _chat_fields(message: dict[str, Any]) -> dict[str, Any]:
    known = {k: v for k, v in message.items() if k in ChatMessage.model_fields}
    if known.get("tool_calls"):
        known["tool_calls"] = [
            {
                "id": c.get("id") or "call",
                "function": {
                    "name": (c.get("function") or {}).get("name", ""),
                    "arguments": (c.get("function") or {}).get("arguments") or "{}",
                },
            }
            for c in known["tool_calls"]
            if isinstance(c, dict)
        ]
    return known


def tool_calls_of(reply: dict[str, Any]) -> list[ToolCall]:
    """The tool calls of an assistant reply (:class:`ValueError` if malformed)."""
    out = []
    for i, call in enumerate(reply.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"reply tool_calls[{i}] has no function name")
        out.append(
            ToolCall(
                id=call.get("id") or f"call_{i}",
                function=FunctionCall(
                    name=function["name"], arguments=function.get("arguments") or "{}"
                ),
            )
        )
    return out


def steps_of(
    call: Call,
    reply: dict[str, Any],
    tools: list[dict[str, Any]] | None,
    policy_version: int,
    *,
    token_ids: list[int] | None = None,
    logprobs: list[float] | None = None,
    trace_id: str | None = None,
    info: dict[str, Any] | None = None,
) -> list[Step]:
    """The steps one answered call adds to its episode: one per tool call in ``reply``
    (the first carries the new turns and the tokens), or one for a text reply."""
    conversation = call.conversation
    calls = tool_calls_of(reply)
    extra: dict[str, Any] = dict(info or {})
    if tools and tools != conversation.tools:
        extra["tools"] = [ToolSchema.model_validate(t).model_dump() for t in tools]
    text = reply.get("content") if isinstance(reply.get("content"), str) else None
    actions = [Action(text=text if i == 0 else None, tool_call=c) for i, c in enumerate(calls)] or [
        Action(text=text or "")
    ]
    first = conversation.step_count
    steps = []
    for i, action in enumerate(actions):
        steps.append(
            Step(
                episode_id=conversation.episode_id,
                step_index=first + i,
                env=conversation.env,
                task_id=conversation.task_id,
                policy_version=policy_version,
                action=action,
                messages=chat_messages(call.new_messages) if i == 0 else [],
                token_ids=token_ids if i == 0 else None,
                logprobs=logprobs if i == 0 else None,
                info=extra if i == 0 else {},
                trace_id=trace_id,
            )
        )
    return steps
