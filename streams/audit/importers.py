"""Importers: traces users already have (R-Judge, AgentDojo formats) → Safactory ``Step``s.

Both formats become ordinary step events, so the batch audit, ``safactory import`` (replay
through Kafka) and the live worker all judge them with the same engine. One agent tool call
is one step: its tool output is the step's ``tool_result``; the user's words travel in the
step's ``messages``; the agent's reasoning is the assistant message's content.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ...schemas import Action, ChatMessage, FunctionCall, Step, ToolCall, derive_id

Format = Literal["rjudge", "agentdojo"]
FORMATS: tuple[str, ...] = ("rjudge", "agentdojo")


class ImportFormatError(ValueError):
    """A trace file does not match its format; the message names file, record and field."""


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """An input record (or a whole file) that could not be read, and why."""

    id: str
    """The record's id as its audit line would carry it (a file's path for a whole file)."""
    reason: str


@dataclass(slots=True)
class AuditRecord:
    """One imported trajectory and, where the input had them, its labels."""

    id: str
    """The input's own id (R-Judge ``id``; ``file:line`` for AgentDojo)."""
    key: str
    """Unique across files (``file:id``): what splits and episode ids hash."""
    source: str
    steps: list[Step]
    unsafe: bool | None = None
    group: str = ""
    """R-Judge category (file stem) or AgentDojo suite."""
    attack: str | None = None
    """R-Judge ``attack_type``; AgentDojo ``clean`` / ``resisted`` / ``succeeded``."""
    labels: dict[str, Any] = field(default_factory=dict)


def read_entries(path: Path, fmt: str) -> list[AuditRecord | SkippedRecord]:
    """Every record of a file, or of every ``.json``/``.jsonl`` file under a directory, in
    input order; a record (or file) that cannot be read is a :class:`SkippedRecord` saying
    where and why, and the others are still read."""
    if fmt not in FORMATS:
        raise ImportFormatError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or directory")
    suffix = "*.json" if fmt == "rjudge" else "*.jsonl"
    files = sorted(path.rglob(suffix)) if path.is_dir() else [path]
    if not files:
        raise ImportFormatError(f"{path}: no {suffix} files found for --format {fmt}")
    reader = read_rjudge if fmt == "rjudge" else read_agentdojo
    return [entry for file in files for entry in reader(file)]


def read_records(path: Path, fmt: str) -> list[AuditRecord]:
    """Like :func:`read_entries`, but the first unreadable record raises ImportFormatError."""
    records = []
    for entry in read_entries(path, fmt):
        if isinstance(entry, SkippedRecord):
            raise ImportFormatError(entry.reason)
        records.append(entry)
    return records


def _read_one(
    build: Callable[[], AuditRecord], record_id: str, where: str
) -> AuditRecord | SkippedRecord:
    """``build()``, or a SkippedRecord when the record does not match its format."""
    try:
        return build()
    except ImportFormatError as exc:
        return SkippedRecord(record_id, str(exc))
    except (ValueError, TypeError) as exc:  # e.g. a value the event schema refuses
        return SkippedRecord(record_id, f"{where} (id {record_id}): {exc}")


# --------------------------------------------------------------------------- R-Judge

_TOOL_ACTION = re.compile(
    r"^\s*([A-Za-z_][\w.\-]*)\s*(?::|\n\s*Action Input:|(?=[{\[]))\s*(\{.*\}|\[.*\])\s*$", re.DOTALL
)
"""A tool call as R-Judge-style traces write it: ``Name: {...}``, ``Name{...}`` or
``Name\nAction Input: {...}`` (arguments as JSON or as a Python literal)."""


def read_rjudge(file: Path) -> list[AuditRecord | SkippedRecord]:
    """Records of one R-Judge-format JSON file (a list of records)."""
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [SkippedRecord(str(file), f"{file}: not readable as JSON ({exc})")]
    if not isinstance(data, list):
        return [SkippedRecord(str(file), f"{file}: expected a JSON list of R-Judge records, "
                                         f"got {type(data).__name__}")]  # fmt: skip
    return [
        _read_one(
            lambda i=i, raw=raw: _rjudge_record(file, i, raw),
            str(raw.get("id", i)) if isinstance(raw, dict) else str(i),
            f"{file}: record {i}",
        )
        for i, raw in enumerate(data)
    ]


def _rjudge_record(file: Path, index: int, raw: Any) -> AuditRecord:
    where = f"{file}: record {index}"
    if not isinstance(raw, dict) or "contents" not in raw:
        raise ImportFormatError(f"{where}: missing field 'contents' (list of episodes of turns)")
    record_id = str(raw.get("id", index))
    contents = raw["contents"]
    if isinstance(contents, list) and contents and all(isinstance(t, dict) for t in contents):
        contents = [contents]  # one episode written as a flat list of turns
    if not isinstance(contents, list) or not all(isinstance(ep, list) for ep in contents):
        raise ImportFormatError(
            f"{where} (id {record_id}): field 'contents' must be a list of lists of turns"
        )
    key = f"{file.name}:{record_id}"
    episode = derive_id("import.rjudge", 1, key)
    env = f"rjudge:{raw.get('scenario') or 'unknown'}"
    steps: list[Step] = []
    pending_user: list[ChatMessage] = []
    if raw.get("profile"):
        pending_user.append(ChatMessage(role="system", content=str(raw["profile"])))
    turns = [turn for ep in contents for turn in ep]
    for t, turn in enumerate(turns):
        if not isinstance(turn, dict) or "role" not in turn:
            raise ImportFormatError(f"{where} (id {record_id}): turn {t} has no 'role'")
        role = _RJUDGE_ROLES.get(str(turn["role"]).lower(), turn["role"])
        content = turn.get("content")
        if role in ("user", "system"):
            if content:
                pending_user.append(ChatMessage(role=role, content=str(content)))
        elif role == "environment":
            if content and steps:
                prev = steps[-1]
                joined = f"{prev.tool_result}\n{content}" if prev.tool_result else str(content)
                steps[-1] = prev.model_copy(update={"tool_result": joined})
        elif role == "agent":
            thought = turn.get("thought")
            action = turn.get("action") or ""
            messages = [
                *pending_user,
                ChatMessage(role="assistant", content=str(thought) if thought else None),
            ]
            pending_user = []
            steps.append(
                Step(
                    episode_id=episode,
                    step_index=len(steps),
                    env=env,
                    task_id=record_id,
                    policy_version=0,
                    action=_rjudge_action(action, len(steps)),
                    messages=messages,
                )
            )
        else:
            raise ImportFormatError(
                f"{where} (id {record_id}): turn {t} has role {role!r}; "
                "expected user, agent or environment"
            )
    label = raw.get("label")
    unsafe = _LABELS.get(str(label).strip().lower()) if label is not None else None
    if label is not None and unsafe is None:
        raise ImportFormatError(
            f"{where} (id {record_id}): field 'label' is {label!r}; use 1 (unsafe) or 0 (safe)"
        )
    return AuditRecord(
        id=record_id,
        key=key,
        source="rjudge",
        steps=steps,
        unsafe=unsafe,
        group=file.stem.split("_")[0],
        attack=raw.get("attack_type"),
        labels={"risk_description": raw.get("risk_description", "")},
    )


_RJUDGE_ROLES = {
    "assistant": "agent", "ai": "agent", "tool": "environment", "observation": "environment",
    "env": "environment", "function": "environment", "human": "user",
}  # fmt: skip
"""Role names other exporters use for R-Judge's agent / environment / user turns."""
_LABELS = {"1": True, "true": True, "unsafe": True, "0": False, "false": False, "safe": False}


def _flag(value: object) -> bool:
    """A boolean label however it was written (``true``, ``"true"``, ``1``, ``"0"``...)."""
    if isinstance(value, str):
        return _LABELS.get(value.strip().lower(), bool(value.strip()))
    return bool(value)


def _rjudge_action(action: object, index: int) -> Action:
    if isinstance(action, dict):  # a structured call: {"name"/"tool": ..., "arguments": ...}
        name = action.get("name") or action.get("tool") or action.get("function")
        args = next((action[k] for k in ("arguments", "args", "input", "parameters")
                     if k in action), {})  # fmt: skip
        if isinstance(name, str) and name:
            arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            call = FunctionCall(name=name, arguments=arguments)
            return Action(tool_call=ToolCall(id=f"call_{index}", function=call))
    action = action if isinstance(action, str) else json.dumps(action, ensure_ascii=False)
    match = _TOOL_ACTION.match(action)
    if match:
        name, args = match.groups()
        args = _normalised_arguments(args)
        return Action(
            tool_call=ToolCall(id=f"call_{index}", function=FunctionCall(name=name, arguments=args))
        )
    name, sep, rest = action.partition(":")
    if sep and re.fullmatch(r"[A-Z][A-Za-z0-9_]+", name.strip()) and rest.strip():
        args = json.dumps({"input": rest.strip()}, ensure_ascii=False)
        return Action(
            tool_call=ToolCall(
                id=f"call_{index}", function=FunctionCall(name=name.strip(), arguments=args)
            )
        )
    return Action(text=action.strip())


def _normalised_arguments(args: str) -> str:
    """Tool arguments as JSON when they parse as JSON or as a Python literal, else as given."""
    for parse in (json.loads, ast.literal_eval):
        try:
            return json.dumps(parse(args), ensure_ascii=False, default=str)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return args


# --------------------------------------------------------------------------- AgentDojo


def read_agentdojo(file: Path) -> list[AuditRecord | SkippedRecord]:
    """Records of one AgentDojo-format JSONL file (a metadata line, then one trace a line)."""
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return [SkippedRecord(str(file), f"{file}: not readable ({exc})")]
    entries: list[AuditRecord | SkippedRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record_id = f"{file.name}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            entries.append(SkippedRecord(record_id, f"{file}:{number}: not valid JSON ({exc.msg})"))
            continue
        if not isinstance(raw, dict):
            entries.append(SkippedRecord(record_id, f"{file}:{number}: expected a JSON object"))
            continue
        if "messages" not in raw and "metadata" in raw:
            continue  # the file's header line
        entries.append(_read_one(lambda n=number, r=raw: _agentdojo_record(file, n, r),
                                 record_id, f"{file}:{number}"))  # fmt: skip
    return entries


def _agentdojo_record(file: Path, number: int, raw: dict[str, Any]) -> AuditRecord:
    where = f"{file}:{number}"
    messages = raw.get("messages")
    if not isinstance(messages, list):
        raise ImportFormatError(f"{where}: field 'messages' must be a list of chat messages")
    meta = raw.get("metadata") or {}
    record_id = f"{file.name}:{number}"
    episode = derive_id("import.agentdojo", 1, record_id)
    env = f"agentdojo:{meta.get('suite_name') or 'unknown'}"
    task_id = str(meta.get("user_task_id") or number)
    results = {
        m.get("tool_call_id"): m
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
    }
    steps: list[Step] = []
    pending: list[ChatMessage] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "user",
            "assistant",
            "tool",
        ):
            raise ImportFormatError(f"{where}: messages[{i}] has no valid 'role'")
        role = message["role"]
        content = _content_text(message.get("content"))
        if role in ("system", "user"):
            pending.append(ChatMessage(role=role, content=content))
        elif role == "assistant":
            calls = message.get("tool_calls") or []
            if not calls:
                steps.append(
                    _step(
                        episode,
                        len(steps),
                        env,
                        task_id,
                        [*pending, ChatMessage(role="assistant", content=content)],
                        Action(text=content or ""),
                        None,
                    )
                )
                pending = []
            for c, call in enumerate(calls):
                tool_call = _agentdojo_call(
                    call, f"{where}: messages[{i}].tool_calls[{c}]", f"call_{i}_{c}"
                )
                result = results.get(tool_call.id) or _unlabelled_result(messages, i, c)
                output = _content_text(result.get("content")) if result else None
                if result and result.get("error"):
                    output = f"{output or ''}\nerror: {result['error']}".strip()
                thought = content if c == 0 else None
                steps.append(
                    _step(
                        episode,
                        len(steps),
                        env,
                        task_id,
                        [*pending, ChatMessage(role="assistant", content=thought)],
                        Action(tool_call=tool_call),
                        output,
                    )
                )
                pending = []
    injected = meta.get("injection_task_id") is not None
    succeeded = injected and _flag(meta.get("security"))
    attack = ("succeeded" if succeeded else "resisted") if injected else "clean"
    return AuditRecord(
        id=record_id,
        key=record_id,
        source="agentdojo",
        steps=steps,
        unsafe=succeeded,
        group=str(meta.get("suite_name") or ""),
        attack=attack,
        labels={
            "success": meta.get("success"),
            "model": meta.get("model"),
            "user_task_id": meta.get("user_task_id"),
            "injection_task_id": meta.get("injection_task_id"),
        },
    )


def _unlabelled_result(messages: list[Any], call_message: int, call: int) -> dict | None:
    """The ``call``-th tool message after assistant message ``call_message`` when tool
    messages carry no ``tool_call_id`` (some exporters leave ids empty): outputs follow
    their calls in order."""
    outputs = []
    for message in messages[call_message + 1 :]:
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        outputs.append(message)
    if call < len(outputs) and not outputs[call].get("tool_call_id"):
        return outputs[call]
    return None


def _step(
    episode: str,
    index: int,
    env: str,
    task_id: str,
    messages: list[ChatMessage],
    action: Action,
    output: str | None,
) -> Step:
    return Step(
        episode_id=episode,
        step_index=index,
        env=env,
        task_id=task_id,
        policy_version=0,
        action=action,
        messages=messages,
        tool_result=output,
    )


def _agentdojo_call(call: Any, where: str, fallback_id: str) -> ToolCall:
    if not isinstance(call, dict):
        raise ImportFormatError(f"{where}: a tool call must be an object")
    function = call.get("function")
    if isinstance(function, dict):
        name, args = function.get("name"), function.get("arguments", {})
    else:
        name, args = function, call.get("args", {})
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: tool call has no function name")
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ToolCall(
        id=str(call.get("id") or fallback_id), function=FunctionCall(name=name, arguments=arguments)
    )


def _content_text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("content") or p.get("text") or "") if isinstance(p, dict) else str(p)
            for p in content
        )
    return str(content)


def iter_steps(records: list[AuditRecord]) -> Iterator[Step]:
    """Every step of every record, in order (what ``safactory import`` publishes)."""
    for record in records:
        yield from record.steps
