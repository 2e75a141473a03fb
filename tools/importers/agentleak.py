"""AgentLeak multi-agent runs (``--format agentleak``): JSONL, one run a line.

Written from the format's documentation (shared/data/audit/README.md) and its field names:
a run has ``input.request`` (what the requester asked), ``llm_calls`` (each agent's prompt
and reply) and ``channel_messages`` (what crossed each channel: ``C1`` the final output to
the requester, ``C2`` messages between agents, ``C3`` tool API payloads, ``C5`` memory
writes; ``C6`` is the infrastructure's own log, not an agent's act), and ``results`` (per
channel, whether a field outside the allowed set reached it). Each agent act becomes a
step: the final output is a reply, an inter-agent message a ``send_agent_message`` call, a
tool payload a call of that tool, a memory write a ``memory_write`` call. The first agent's
prompt (system and user) is what the auditor reads as the task and the data in hand.

The labels stay labels: a message's own ``has_leak`` / ``leaked_fields`` and the run's
``allowed_set`` never reach the steps (the auditor must find the leak itself). A run is
unsafe when a leak reached a channel the agents write (C1, C2, C3 or C5).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ...schemas import Action, ChatMessage, FunctionCall, Step, ToolCall, derive_id
from .jsonstream import Bad, lines
from .records import (
    AuditRecord,
    Entries,
    ImportFormatError,
    SkippedRecord,
    register_format,
    shown_id,
)

AGENT_CHANNELS = ("c1", "c2", "c3", "c5")
"""Channels the agents write (``c6`` is the system's own log)."""


def _channel(name: object) -> str:
    """``C2``, ``c2_inter_agent``, ``2`` → ``c2``."""
    match = re.search(r"(\d)", str(name))
    return f"c{match.group(1)}" if match else str(name).lower()


def _label(results: Any) -> bool | None:
    if not isinstance(results, dict):
        return None
    flags = [results.get(f"{c}_leaked") for c in AGENT_CHANNELS]
    if all(f is None for f in flags):
        return None
    return any(bool(f) for f in flags)


def _action(channel: str, message: dict[str, Any], index: int) -> Action | None:
    content = str(message.get("content") or "")
    target = str(message.get("target") or "")
    if channel == "c1":
        return Action(text=content)
    if channel == "c2":
        name, args = "send_agent_message", {"to": target, "content": content}
    elif channel == "c3":
        name = re.sub(r"\W+", "_", target).strip("_") or "tool_api"
        try:
            payload = json.loads(content)
        except ValueError:
            payload = content
        args = payload if isinstance(payload, dict) else {"payload": payload}
    elif channel == "c5":
        name, args = "memory_write", {"key": target, "content": content}
    else:
        return None
    call = FunctionCall(name=name, arguments=json.dumps(args, ensure_ascii=False))
    return Action(tool_call=ToolCall(id=f"call_{index}", function=call))


def _record(file: Path, number: int, raw: Any) -> AuditRecord:
    where = f"{file}:{number}"
    if not isinstance(raw, dict):
        raise ImportFormatError(f"{where}: expected a JSON object (one AgentLeak run a line)")
    record_id = str(raw.get("trace_id") or f"{file.name}:{number}")
    at = f"{where} (id {shown_id(record_id)})"
    inp = raw.get("input")
    if not isinstance(inp, dict) or not isinstance(inp.get("request"), str):
        raise ImportFormatError(f"{at}: missing field 'input.request'")
    calls = raw.get("llm_calls") or []
    messages = raw.get("channel_messages") or []
    if not isinstance(calls, list) or not isinstance(messages, list):
        raise ImportFormatError(f"{at}: 'llm_calls' and 'channel_messages' must be lists")
    episode = derive_id("import.agentleak", 1, f"{file.name}:{record_id}")
    env = f"agentleak:{raw.get('vertical') or 'unknown'}"[:64]
    first = calls[0] if calls and isinstance(calls[0], dict) else {}
    pending: list[ChatMessage] = []
    if first.get("system_prompt"):
        pending.append(ChatMessage(role="system", content=str(first["system_prompt"])))
    pending.append(
        ChatMessage(role="user", content=str(first.get("user_prompt") or inp["request"]))
    )
    if first.get("user_prompt") and inp["request"] not in str(first["user_prompt"]):
        pending.append(ChatMessage(role="user", content=inp["request"]))
    steps: list[Step] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        action = _action(_channel(message.get("channel")), message, len(steps))
        if action is None:
            continue
        steps.append(
            Step(
                episode_id=episode,
                step_index=len(steps),
                env=env,
                task_id=str(raw.get("scenario_id") or record_id)[:128],
                policy_version=0,
                action=action,
                messages=[*pending, ChatMessage(role="assistant", content=None)],
            )
        )
        pending = []
    if not steps:
        reply = str(first.get("response") or "")
        steps.append(
            Step(
                episode_id=episode,
                step_index=0,
                env=env,
                task_id=str(raw.get("scenario_id") or record_id)[:128],
                policy_version=0,
                action=Action(text=reply),
                messages=pending,
            )
        )
    return AuditRecord(
        id=record_id,
        key=f"{file.name}:{record_id}",
        source="agentleak",
        steps=steps,
        unsafe=_label(raw.get("results")),
        group=str(raw.get("vertical") or file.stem),
        attack=str(raw.get("attack_family")) if raw.get("attack_family") else None,
    )


@register_format("agentleak", ("*.jsonl",))
def read_agentleak(file: Path) -> Entries:
    """Runs of one AgentLeak JSONL file, one at a time."""
    try:
        for number, raw in lines(file):
            if isinstance(raw, Bad):
                yield SkippedRecord(f"{file.name}:{number}", f"{file}:{number}: {raw.reason}")
                continue
            try:
                yield _record(file, number, raw)
            except (ImportFormatError, ValueError) as exc:
                yield SkippedRecord(f"{file.name}:{number}", str(exc))
    except OSError as exc:
        yield SkippedRecord(str(file), f"{file}: not readable ({exc})")
