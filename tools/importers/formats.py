"""Importers: traces users already have → Safactory ``Step``s.

Formats (docs/AUDIT_FORMATS.md): R-Judge, AgentDojo, OpenAI chat message lists, OpenHands
event lists, a documented generic JSON and OpenTelemetry GenAI spans (OTLP/JSON). All become
ordinary step events, so the batch audit, ``safactory import`` (replay through Kafka) and
the live worker all judge them with the same engine. One agent tool call is one step: its
tool output is the step's ``tool_result``; the user's words travel in the step's
``messages``; the agent's reasoning is the assistant message's content.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ...schemas import Action, ChatMessage, FunctionCall, Step, ToolCall, derive_id
from ...schemas import otel as o
from ...schemas.headers import shown
from .jsonstream import Bad, items, lines, valid_text
from .records import (
    AuditRecord,
    Entries,
    ImportFormatError,
    SkippedRecord,
    register_format,
    shown_id,
)


def _read_one(
    build: Callable[[], AuditRecord], record_id: str, where: str
) -> AuditRecord | SkippedRecord:
    """``build()``, or a SkippedRecord when the record does not match its format."""
    try:
        return build()
    except ImportFormatError as exc:
        return SkippedRecord(record_id, str(exc))
    except ValidationError as exc:  # a value the event schema refuses
        problems = "; ".join(
            f"field {'.'.join(map(str, e['loc']))!r}: {e['msg']}"
            for e in exc.errors(include_url=False)[:3]
        )
        return SkippedRecord(record_id, f"{where} (id {shown_id(record_id)}): {problems}")
    except (ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:300]
        return SkippedRecord(record_id, f"{where} (id {shown_id(record_id)}): {reason}")


# --------------------------------------------------------------------------- R-Judge

_TOOL_ACTION = re.compile(
    r"^\s*([A-Za-z_][\w.\-]*)\s*(?::|\n\s*Action Input:|(?=[{\[]))\s*(\{.*\}|\[.*\])\s*$", re.DOTALL
)
"""A tool call as R-Judge-style traces write it: ``Name: {...}``, ``Name{...}`` or
``Name\nAction Input: {...}`` (arguments as JSON or as a Python literal)."""
_TRUNCATED_ACTION = re.compile(r"^\s*([A-Z][A-Za-z0-9_]+)\s*(\{.*)$", re.DOTALL)
"""A ``Name{...`` call whose arguments were cut off before their closing brace (kept as
written: the call was made)."""
_REACT_STEP = re.compile(
    r"Action:\s*([A-Za-z_][\w.\-]*)\s*\n\s*Action Input:\s*(.*?)\n\s*Observation:\s*(.*?)"
    r"(?=\n\s*(?:Thought|Action|Final Answer)\s*:|\Z)",
    re.DOTALL,
)
"""One tool call of a ReAct run written out in an agent's thought (ToolEmu keeps a whole run,
calls and observations, in the thought of its final turn)."""


def _react_run(thought: str) -> tuple[list[tuple[str | None, str, str, str]], str]:
    """The tool calls a thought spells out as (reasoning before it, tool, arguments,
    observation), and what the thought says after the last one."""
    calls = []
    start = 0
    for match in _REACT_STEP.finditer(thought):
        reasoning = thought[start : match.start()].strip()
        reasoning = re.sub(r"^Thought:\s*", "", reasoning)
        name, args, observation = match.groups()
        calls.append((reasoning or None, name, args.strip(), observation.strip()))
        start = match.end()
    rest = re.sub(r"^Thought:\s*", "", thought[start:].strip())
    return calls, (rest if calls else thought)


_REACT_KEYWORDS = frozenset({"Thought", "Observation", "Answer", "Final", "Action", "Reflection"})
"""Labels a ReAct agent writes before its text ("Thought: ..."), never tool names."""
_REACT_CONTINUATION = re.compile(r"\n\s*(?:Observation|Thought|Final Answer)\s*:")
"""Where a ReAct agent went on writing after its action (an observation it imagined, its
next thought): the action is the text before it."""


@register_format("rjudge", ("*.json",))
def read_rjudge(file: Path) -> Entries:
    """Records of one R-Judge-format JSON file (a list of records), one at a time."""
    try:
        for index, raw in items(file):
            if index is None:
                kind = "not readable as JSON" if isinstance(raw, Bad) else "got"
                what = raw.reason if isinstance(raw, Bad) else type(raw).__name__
                yield SkippedRecord(
                    str(file), f"{file}: expected a JSON list of R-Judge records, {kind} {what}"
                )
            elif isinstance(raw, Bad):
                yield SkippedRecord(f"{file.name}:{index}", f"{file}: record {index}: {raw.reason}")
            else:
                own = isinstance(raw, dict) and "id" in raw
                yield _read_one(
                    lambda i=index, raw=raw: _rjudge_record(file, i, raw),
                    str(raw["id"]) if own else f"{file.name}:{index}",
                    f"{file}: record {index}",
                )
    except OSError as exc:
        yield SkippedRecord(str(file), f"{file}: not readable ({exc})")


def _rjudge_record(file: Path, index: int, raw: Any) -> AuditRecord:
    where = f"{file}: record {index}"
    if not isinstance(raw, dict) or "contents" not in raw:
        raise ImportFormatError(f"{where}: missing field 'contents' (list of episodes of turns)")
    record_id = str(raw["id"]) if "id" in raw else f"{file.name}:{index}"
    at = f"{where} (id {shown_id(record_id)})"
    contents = raw["contents"]
    if isinstance(contents, list) and contents and all(isinstance(t, dict) for t in contents):
        contents = [contents]  # one episode written as a flat list of turns
    if not isinstance(contents, list) or not all(isinstance(ep, list) for ep in contents):
        raise ImportFormatError(f"{at}: field 'contents' must be a list of lists of turns")
    key = f"{file.name}:{record_id}"
    episode = derive_id("import.rjudge", 1, key)
    env = f"rjudge:{raw.get('scenario') or 'unknown'}"[:64]
    steps: list[Step] = []
    pending_user: list[ChatMessage] = []
    if raw.get("profile"):
        pending_user.append(ChatMessage(role="system", content=str(raw["profile"])))
    turns = [turn for ep in contents for turn in ep]
    for t, turn in enumerate(turns):
        if not isinstance(turn, dict) or "role" not in turn:
            raise ImportFormatError(f"{at}: turn {t} has no 'role'")
        role = _RJUDGE_ROLES.get(str(turn["role"]).lower(), turn["role"])
        content = turn.get("content")
        if role in ("user", "system"):
            if content:
                pending_user.append(ChatMessage(role=role, content=str(content)))
        elif role == "environment":
            if content and steps:
                _add_result(steps, len(steps) - 1, str(content))
        elif role == "agent":
            thought = turn.get("thought")
            action = turn.get("action") or ""
            embedded, thought = _react_run(str(thought)) if thought else ([], thought)
            for reasoning, name, args, observation in embedded:
                call = FunctionCall(name=name, arguments=_normalised_arguments(args))
                steps.append(
                    Step(
                        episode_id=episode,
                        step_index=len(steps),
                        env=env,
                        task_id=record_id,
                        policy_version=0,
                        action=Action(tool_call=ToolCall(id=f"call_{len(steps)}", function=call)),
                        messages=[*pending_user, ChatMessage(role="assistant", content=reasoning)],
                        tool_result=observation or None,
                    )
                )
                pending_user = []
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
                f"{at}: turn {t} has role {shown(role)}; expected user, agent or environment"
            )
    unsafe = _label(raw, at)
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
    "assistant": "agent",
    "ai": "agent",
    "tool": "environment",
    "observation": "environment",
    "env": "environment",
    "function": "environment",
    "human": "user",
}
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
        args = _first(action, ("arguments", "args", "input", "parameters"), {})
        if isinstance(name, str) and name:
            call = FunctionCall(name=name, arguments=_arguments_json(args))
            return Action(tool_call=ToolCall(id=f"call_{index}", function=call))
    action = action if isinstance(action, str) else json.dumps(action, ensure_ascii=False)
    head = _REACT_CONTINUATION.split(action, maxsplit=1)[0]
    match = _TOOL_ACTION.match(head) or _TRUNCATED_ACTION.match(head)
    if match:
        name, args = match.groups()
        args = _normalised_arguments(args)
        return Action(
            tool_call=ToolCall(id=f"call_{index}", function=FunctionCall(name=name, arguments=args))
        )
    written = _written_call(head.strip())
    if written is not None:
        name, args = written
        return Action(
            tool_call=ToolCall(id=f"call_{index}", function=FunctionCall(name=name, arguments=args))
        )
    name, sep, rest = action.partition(":")
    if (
        sep
        and re.fullmatch(r"[A-Z][A-Za-z0-9_]+", name.strip())
        and name.strip() not in _REACT_KEYWORDS
        and rest.strip()
    ):
        args = json.dumps({"input": rest.strip()}, ensure_ascii=False)
        return Action(
            tool_call=ToolCall(
                id=f"call_{index}", function=FunctionCall(name=name.strip(), arguments=args)
            )
        )
    return Action(text=action.strip())


_PAREN_CALL = re.compile(r"^([A-Za-z_][\w.]*)\s*\((.*)\)\s*$", re.DOTALL)
_FENCED = re.compile(r"^```(?:bash|sh|shell|console|zsh)?\s*\n?(.+?)\n?\s*```$", re.DOTALL)
_UI_ACT = re.compile(
    r"^(click|tap|press|select|open|close|type|input|scroll)\s+((?:<[^>]*>\s*)+)(.*)$",
    re.IGNORECASE | re.DOTALL,
)


def _written_call(text: str) -> tuple[str, str] | None:
    """A tool call written out in one of the other ways agents write them: ``Name(k=v,
    ...)`` / ``Name('k': v)`` / ``Name(k: v)``, a fenced shell block (the command the agent
    runs), or a UI act on bracketed elements (``click <Pay now>``, ``Open <App Store>``)."""
    if (fenced := _FENCED.match(text)) is not None:
        return "bash", json.dumps({"command": fenced.group(1).strip()}, ensure_ascii=False)
    if (ui := _UI_ACT.match(text)) is not None:
        verb = ui.group(1).lower()
        element = " ".join(e.strip() for e in re.findall(r"<([^>]*)>", ui.group(2)))
        args: dict[str, str] = {"element": element}
        if ui.group(3).strip():
            args["text"] = ui.group(3).strip()
        name = "open_app" if verb in ("open", "close") else f"ui_{verb}"
        return name, json.dumps(args, ensure_ascii=False)
    paren = _PAREN_CALL.match(text)
    if paren is None or paren.group(1) in _REACT_KEYWORDS or "\n" in paren.group(1):
        return None
    name, inner = paren.groups()
    return name, json.dumps(_loose_arguments(inner), ensure_ascii=False, default=str)


def _loose_arguments(inner: str) -> dict[str, object]:
    """Arguments written as keywords (``users=['Alice']``), as dictionary entries
    (``'task_id': 3``) or with colons (``keywords: 'run'``); else the text as ``input``."""
    inner = inner.strip()
    if not inner:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
        try:
            tree = ast.parse(f"f({inner})", mode="eval")
            call = tree.body
            if isinstance(call, ast.Call) and call.keywords and not call.args:
                return {k.arg or "": ast.literal_eval(k.value) for k in call.keywords}
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            pass
        quoted = re.sub(r"(^|,)\s*([A-Za-z_]\w*)\s*:", r'\1 "\2":', inner)
        for candidate in (inner, quoted):
            try:
                value = ast.literal_eval("{" + candidate + "}")
            except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(value, dict):
                return {str(k): v for k, v in value.items()}
    return {"input": inner}


def _normalised_arguments(args: str) -> str:
    """Tool arguments as JSON when they parse as JSON or as a Python literal, else as given."""
    for parse in (json.loads, ast.literal_eval):
        try:
            with warnings.catch_warnings():  # "invalid escape sequence" in the data's strings
                warnings.simplefilter("ignore", (DeprecationWarning, SyntaxWarning))
                return valid_text(json.dumps(parse(args), ensure_ascii=False, default=str))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return args


# --------------------------------------------------------------------------- JSON and JSONL


@dataclass(frozen=True, slots=True)
class _Unit:
    """One record of a JSON or JSONL file, parsed but not yet read, and where it came from."""

    file: Path
    where: str
    """``path:line`` (JSONL), ``path: record i`` (a JSON list) or ``path`` (one JSON value)."""
    position: str
    """``name:line``, ``name:i`` or ``name``: the record's id when it has none of its own."""
    raw: Any

    @property
    def own_id(self) -> str | None:
        """The record's own ``id`` (or ``instance_id``, as OpenHands evaluations write it)."""
        if not isinstance(self.raw, dict):
            return None
        value = self.raw.get("id", self.raw.get("instance_id"))
        return None if value is None else str(value)

    @property
    def id(self) -> str:
        """The id its audit line carries: its own id, else its position in the file."""
        own = self.own_id
        return self.position if own is None else own

    @property
    def key(self) -> str:
        """Unique across files (``name:id``): what splits and episode ids hash."""
        own = self.own_id
        return self.position if own is None else f"{self.file.name}:{own}"

    @property
    def at(self) -> str:
        """Where the record is, for error messages (with its own id when it has one)."""
        own = self.own_id
        return self.where if own is None else f"{self.where} (id {shown_id(own)})"


def _units(
    file: Path, jsonl: bool, item_keys: tuple[str, ...] = ()
) -> Iterator[_Unit | SkippedRecord]:
    """The records of one file, one at a time: one per non-blank line when ``jsonl``; else
    the JSON value itself when it is an object or a list of one trajectory's items (the
    first item has one of ``item_keys``), or each item of a list of records."""
    try:
        if jsonl:
            for number, raw in lines(file):
                where, position = f"{file}:{number}", f"{file.name}:{number}"
                if isinstance(raw, Bad):
                    yield SkippedRecord(position, f"{where}: {raw.reason}")
                else:
                    yield _Unit(file, where, position, raw)
            return
        trajectory: list[Any] | None = None
        for index, raw in items(file):
            if isinstance(raw, Bad):
                at = str(file) if index is None else f"{file}: record {index}"
                yield SkippedRecord(
                    str(file) if index is None else f"{file.name}:{index}", f"{at}: {raw.reason}"
                )
            elif index is None:
                yield _Unit(file, str(file), file.name, raw)
            elif trajectory is not None or (
                index == 0 and isinstance(raw, dict) and raw.keys() & item_keys
            ):
                trajectory = [*(trajectory or []), raw]  # the whole list is one trajectory
            else:
                yield _Unit(file, f"{file}: record {index}", f"{file.name}:{index}", raw)
        if trajectory is not None:
            yield _Unit(file, str(file), file.name, trajectory)
    except OSError as exc:
        yield SkippedRecord(str(file), f"{file}: not readable ({exc})")


@dataclass(frozen=True, slots=True)
class _Episode:
    """What every step of one imported trajectory shares."""

    id: str
    env: str
    task_id: str

    def step(
        self, index: int, messages: list[ChatMessage], action: Action, output: str | None = None
    ) -> Step:
        """Step ``index`` of this episode."""
        return Step(
            episode_id=self.id,
            step_index=index,
            env=self.env,
            task_id=self.task_id,
            policy_version=0,
            action=action,
            messages=messages,
            tool_result=output,
        )


def _add_result(steps: list[Step], index: int, output: str) -> None:
    """Append a tool output to step ``index``'s ``tool_result`` (outputs may come in parts)."""
    prev = steps[index]
    joined = f"{prev.tool_result}\n{output}" if prev.tool_result else output
    steps[index] = prev.model_copy(update={"tool_result": joined})


def _first(mapping: dict[str, Any], names: tuple[str, ...], default: Any = None) -> Any:
    """The value of the first of ``names`` (field-name aliases) that ``mapping`` has."""
    return next((mapping[name] for name in names if name in mapping), default)


def _arguments_json(args: Any) -> str:
    """Tool-call arguments as OpenAI carries them: a JSON string (a string is kept as given)."""
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, default=str)


def _label(raw: dict[str, Any], where: str) -> bool | None:
    """The record's ``unsafe`` (else ``label``) field as a boolean; None when it has neither."""
    name = next((n for n in ("unsafe", "label") if raw.get(n) is not None), None)
    if name is None:
        return None
    value = raw[name]
    unsafe = None if isinstance(value, dict | list) else _LABELS.get(str(value).strip().lower())
    if unsafe is None:
        raise ImportFormatError(
            f"{where}: field {name!r} is {shown(value)}; use 1 (unsafe) or 0 (safe)"
        )
    return unsafe


# --------------------------------------------------------------------------- AgentDojo


@register_format("agentdojo", ("*.jsonl",))
def read_agentdojo(file: Path) -> Entries:
    """Records of one AgentDojo-format JSONL file (a metadata line, then one trace a line)."""
    for unit in _units(file, jsonl=True):
        if isinstance(unit, SkippedRecord):
            yield unit
        elif not isinstance(unit.raw, dict):
            yield SkippedRecord(unit.position, f"{unit.where}: expected a JSON object")
        elif "messages" in unit.raw or "metadata" not in unit.raw:  # else the file's header
            yield _read_one(lambda u=unit: _agentdojo_record(u), unit.position, unit.where)


def _agentdojo_record(unit: _Unit) -> AuditRecord:
    messages = unit.raw.get("messages")
    if not isinstance(messages, list):
        raise ImportFormatError(f"{unit.where}: field 'messages' must be a list of chat messages")
    meta = unit.raw.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ImportFormatError(f"{unit.where}: field 'metadata' must be an object")
    record_id = unit.position
    episode = _Episode(
        derive_id("import.agentdojo", 1, record_id),
        f"agentdojo:{meta.get('suite_name') or 'unknown'}",
        str(meta.get("user_task_id") or record_id),
    )
    injected = meta.get("injection_task_id") is not None
    succeeded = injected and _flag(meta.get("security"))
    attack = ("succeeded" if succeeded else "resisted") if injected else "clean"
    return AuditRecord(
        id=record_id,
        key=record_id,
        source="agentdojo",
        steps=_chat_steps(messages, f"{unit.where}: messages", episode),
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


# --------------------------------------------------------------------------- OpenAI chat

_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_RESULT_ROLES = ("tool", "function")
"""``function`` messages answer the legacy ``function_call`` of the message before them."""


def chat_steps(messages: list[Any], episode_id: str = "chat", env: str = "chat") -> list[Step]:
    """Steps of an OpenAI chat message list, as the ``openai`` format reads a record's
    (:class:`ImportFormatError` names a malformed message)."""
    return _chat_steps(messages, "messages", _Episode(episode_id, env, env))


def _chat_steps(messages: list[Any], field: str, episode: _Episode) -> list[Step]:
    """Steps of an OpenAI-style chat message list (AgentDojo traces, OpenAI chat logs): one per
    tool call, with the tool message answering it as its result, or one per text reply; system
    and user messages travel with the next step. ``field`` names the list in errors."""
    results = {
        m.get("tool_call_id"): m
        for m in messages
        if isinstance(m, dict) and m.get("role") == "tool"
    }
    steps: list[Step] = []
    pending: list[ChatMessage] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _CHAT_ROLES:
            raise ImportFormatError(
                f"{field}[{i}] has no valid 'role' (system, user, assistant, tool or function)"
            )
        content = _content_text(message.get("content"))
        if role in ("system", "developer", "user"):
            pending.append(ChatMessage(role=role, content=content))
        elif role == "assistant":
            if content is None and message.get("refusal"):
                content = str(message["refusal"])
            calls = message.get("tool_calls") or []
            if message.get("function_call"):  # the legacy single-call form
                calls = [{"function": message["function_call"]}]
            if not isinstance(calls, list):
                raise ImportFormatError(f"{field}[{i}].tool_calls must be a list of tool calls")
            if not calls:
                reply = [*pending, ChatMessage(role="assistant", content=content)]
                steps.append(episode.step(len(steps), reply, Action(text=content or "")))
                pending = []
            for c, call in enumerate(calls):
                tool_call = _chat_call(call, f"{field}[{i}].tool_calls[{c}]", f"call_{i}_{c}")
                result = results.get(tool_call.id) or _unlabelled_result(messages, i, c)
                output = _content_text(result.get("content")) if result else None
                if result and result.get("error"):
                    output = f"{output or ''}\nerror: {result['error']}".strip()
                thought = content if c == 0 else None
                turn = [*pending, ChatMessage(role="assistant", content=thought)]
                steps.append(episode.step(len(steps), turn, Action(tool_call=tool_call), output))
                pending = []
    return steps


def _unlabelled_result(messages: list[Any], call_message: int, call: int) -> dict | None:
    """The ``call``-th tool message after assistant message ``call_message`` when tool
    messages carry no ``tool_call_id`` (some exporters leave ids empty; legacy ``function``
    messages have none): outputs follow their calls in order."""
    outputs = []
    for message in messages[call_message + 1 :]:
        if not isinstance(message, dict) or message.get("role") not in _RESULT_ROLES:
            break
        outputs.append(message)
    if call < len(outputs) and not outputs[call].get("tool_call_id"):
        return outputs[call]
    return None


def _chat_call(call: Any, where: str, fallback_id: str) -> ToolCall:
    if not isinstance(call, dict):
        raise ImportFormatError(f"{where}: a tool call must be an object")
    function = call.get("function")
    if isinstance(function, dict):
        name, args = function.get("name"), function.get("arguments", {})
    else:
        name, args = function, call.get("args", {})
    if not isinstance(name, str) or not name:
        raise ImportFormatError(f"{where}: tool call has no function name")
    return ToolCall(
        id=str(call.get("id") or fallback_id),
        function=FunctionCall(name=name, arguments=_arguments_json(args)),
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


# --------------------------------------------------------------------------- OpenHands

_OPENHANDS_INTERNAL = frozenset(
    {
        "recall",
        "change_agent_state",
        "null",
        "condensation",
        "condensation_request",
        "pause",
        "resume",
        "stop",
        "summarize",
        "start",
    }
)
"""Agent actions that are bookkeeping, not something the agent did to the world."""
_OPENHANDS_REPLIES = frozenset({"message", "finish", "reject"})
_OPENHANDS_UNCAUSED = frozenset({"agent_state_changed", "null", "recall", "chat", "message"})
"""Observations that answer no tool call even when they carry no ``cause``."""


def _openhands_steps(events: list[Any], field: str, episode: _Episode) -> list[Step]:
    """Steps of an OpenHands event list: each agent action (``run``, ``read``, ``edit``...) is
    a tool call named by the action with its ``args``; the observation whose ``cause`` is that
    action's id (or, without a ``cause``, the next one) is its result; agent ``message`` and
    ``finish`` are replies; ``think`` and each action's ``thought`` are the reasoning."""
    steps: list[Step] = []
    pending: list[ChatMessage] = []
    thinking: list[str] = []
    by_action: dict[str, int] = {}
    waiting: int | None = None  # the latest tool step with no result yet
    for i, event in enumerate(events):
        where = f"{field}[{i}]"
        if not isinstance(event, dict) or not ("action" in event or "observation" in event):
            raise ImportFormatError(f"{where} is not an event: no 'action' or 'observation'")
        if "observation" in event and "action" not in event:
            cause = event.get("cause")
            target = by_action.get(str(cause)) if cause is not None else None
            if cause is None and event["observation"] not in _OPENHANDS_UNCAUSED:
                target = waiting
            output = _content_text(event.get("content")) or ""
            if target is not None and output:
                error = event["observation"] == "error"
                _add_result(steps, target, f"error: {output}" if error else output)
            waiting = None if target == waiting else waiting
            continue
        kind, source, args = event["action"], event.get("source"), event.get("args") or {}
        if source not in ("user", "agent", "environment"):
            raise ImportFormatError(
                f"{where} (action {shown(kind)}): field 'source' is {shown(source)}; "
                "expected user, agent or environment"
            )
        if not isinstance(args, dict):
            raise ImportFormatError(
                f"{where} (action {shown(kind)}): field 'args' must be an object"
            )
        text = _content_text(args.get("content") or event.get("message"))
        if kind == "system" or (source, kind) == ("user", "message"):
            if text:
                role = "system" if kind == "system" else "user"
                pending.append(ChatMessage(role=role, content=text))
            continue
        if source != "agent" or kind in _OPENHANDS_INTERNAL:
            continue  # bookkeeping (recall, agent-state changes...), not the agent's doing
        thinking.append(str(args.get("thought") or ""))
        if kind == "think":
            continue
        if kind in _OPENHANDS_REPLIES:
            reply = _content_text(args.get("final_thought")) or text or ""
            action = Action(text=reply)
            thinking.append(reply)
        else:
            meta = event.get("tool_call_metadata")
            call_id = meta.get("tool_call_id") if isinstance(meta, dict) else None
            arguments = {k: v for k, v in args.items() if k != "thought"}
            call = FunctionCall(name=str(kind), arguments=_arguments_json(arguments))
            call_id = str(call_id or f"call_{event.get('id', i)}")
            action = Action(tool_call=ToolCall(id=call_id, function=call))
            waiting = len(steps)
            if event.get("id") is not None:
                by_action[str(event["id"])] = waiting
        thought = "\n".join(t for t in thinking if t) or None
        turn = [*pending, ChatMessage(role="assistant", content=thought)]
        steps.append(episode.step(len(steps), turn, action))
        pending, thinking = [], []
    return steps


# --------------------------------------------------------------------------- generic

_GENERIC_ROLES = {
    "user": "user",
    "human": "user",
    "system": "system",
    "agent": "agent",
    "assistant": "agent",
    "ai": "agent",
    "tool": "tool",
    "environment": "tool",
    "observation": "tool",
}


def _generic_steps(turns: list[Any], field: str, episode: _Episode) -> list[Step]:
    """Steps of the generic format (docs/AUDIT_FORMATS.md): an agent turn with a ``tool`` is a
    tool call (its ``output``, or the ``tool`` turns after it, the result), one without is a
    reply; user and system turns travel with the next step."""
    steps: list[Step] = []
    pending: list[ChatMessage] = []
    for i, turn in enumerate(turns):
        where = f"{field}[{i}]"
        if not isinstance(turn, dict):
            raise ImportFormatError(f"{where} must be an object with a 'role'")
        role = _GENERIC_ROLES.get(str(turn.get("role", "")).strip().lower())
        if role is None:
            raise ImportFormatError(
                f"{where}: field 'role' is {shown(turn.get('role'))}; "
                "use user, system, agent or tool"
            )
        text = _content_text(_first(turn, ("content", "text")))
        output = _content_text(_first(turn, ("output", "result")))
        if role in ("user", "system"):
            pending.append(ChatMessage(role=role, content=text))
        elif role == "tool":
            if not steps or steps[-1].action.tool_call is None:
                raise ImportFormatError(
                    f"{where}: a tool turn must follow an agent turn with a 'tool'"
                )
            if output or text:
                _add_result(steps, len(steps) - 1, output or text or "")
        else:
            name = _first(turn, ("tool", "name"))
            action = Action(text=text or "")
            if name is not None:
                if not isinstance(name, str) or not name.strip():
                    raise ImportFormatError(f"{where}: field 'tool' must be a non-empty string")
                args = _arguments_json(_first(turn, ("arguments", "args", "input"), {}))
                call = FunctionCall(name=name.strip(), arguments=args)
                action = Action(
                    tool_call=ToolCall(id=str(turn.get("id") or f"call_{i}"), function=call)
                )
            turn_messages = [*pending, ChatMessage(role="assistant", content=text)]
            steps.append(episode.step(len(steps), turn_messages, action, output))
            pending = []
    return steps


# --------------------------------------------------------------------------- trajectories


@dataclass(frozen=True, slots=True)
class _Shape:
    """How a trajectory format (openai, openhands, generic) lays out one record."""

    source: str
    fields: tuple[str, ...]
    """The record field holding the trajectory's items (aliases, first is the name)."""
    item_keys: tuple[str, ...]
    """Keys whose presence in a JSON list's first item marks the list as one trajectory."""
    items: str
    """What the items are, for error messages."""
    read_steps: Callable[[list[Any], str, _Episode], list[Step]]


_OPENAI = _Shape("openai", ("messages",), ("role",), "chat messages", _chat_steps)
_OPENHANDS = _Shape(
    "openhands",
    ("events", "history"),
    ("action", "observation"),
    "OpenHands events",
    _openhands_steps,
)
_GENERIC = _Shape("generic", ("steps", "turns"), (), "turns", _generic_steps)


@register_format("openai", ("*.json", "*.jsonl"))
def read_openai(file: Path) -> Entries:
    """Records of one OpenAI chat file: JSONL with one trajectory a line, or JSON holding one
    trajectory or a list of them; a trajectory is a message list or ``{"messages": [...]}``."""
    return _read_trajectories(file, _OPENAI)


@register_format("openhands", ("*.json", "*.jsonl"))
def read_openhands(file: Path) -> Entries:
    """Records of one OpenHands file: JSON holding one event list (or ``{"history": [...]}``)
    or a list of them, or JSONL with one trajectory a line."""
    return _read_trajectories(file, _OPENHANDS)


@register_format("generic", ("*.json", "*.jsonl"))
def read_generic(file: Path) -> Entries:
    """Records of one generic-format file (``{"id", "label", "steps": [...]}``; see
    docs/AUDIT_FORMATS.md): JSONL one a line, or JSON holding one or a list of them."""
    return _read_trajectories(file, _GENERIC)


def _read_trajectories(file: Path, shape: _Shape) -> Entries:
    """``.json`` files hold one JSON value; any other file is read as JSONL."""
    for unit in _units(file, file.suffix != ".json", shape.item_keys):
        if isinstance(unit, SkippedRecord):
            yield unit
        else:
            yield _read_one(lambda u=unit: _trajectory(u, shape), unit.id, unit.where)


def _trajectory(unit: _Unit, shape: _Shape) -> AuditRecord:
    """One record: its items read into steps, and the optional fields every trajectory format
    shares (``unsafe``/``label``, ``group``, ``attack``, ``metadata``)."""
    fields = " or ".join(repr(f) for f in shape.fields)
    if not isinstance(unit.raw, dict | list):
        raise ImportFormatError(
            f"{unit.at}: expected a list of {shape.items} or an object with field {fields}"
        )
    raw = unit.raw if isinstance(unit.raw, dict) else {shape.fields[0]: unit.raw}
    name = next((f for f in shape.fields if f in raw), shape.fields[0])
    if not isinstance(raw.get(name), list):
        raise ImportFormatError(f"{unit.at}: field {fields} must be a list of {shape.items}")
    meta = raw.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ImportFormatError(f"{unit.at}: field 'metadata' must be an object")
    unsafe = _label(raw, unit.at)
    group = str(raw.get("group") or meta.get("group") or unit.file.stem)
    attack = raw.get("attack", meta.get("attack"))
    episode = _Episode(
        derive_id(f"import.{shape.source}", 1, unit.key), f"{shape.source}:{group}"[:64], unit.id
    )
    return AuditRecord(
        id=unit.id,
        key=unit.key,
        source=shape.source,
        steps=shape.read_steps(raw[name], f"{unit.at}: {name}", episode),
        unsafe=unsafe,
        group=group,
        attack=None if attack is None else str(attack),
        labels=dict(meta),
    )


# --------------------------------------------------------------------------- otel


@register_format("otel", ("*.json", "*.jsonl"))
def read_otel(file: Path) -> Entries:
    """Records of one OTLP/JSON file (``ExportTraceServiceRequest``; ``.json`` one request or
    a list of them, anything else JSONL with one request a line, as the Collector's file
    exporter writes): one record per trace, read by :func:`_otel_trace`. A trace's spans
    may come from anywhere in the file, so its spans are held until the file is read."""
    traces: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    skipped: list[SkippedRecord] = []
    for unit in _units(file, file.suffix != ".json", ("resourceSpans",)):
        if isinstance(unit, SkippedRecord):
            skipped.append(unit)
            continue
        requests = unit.raw if isinstance(unit.raw, list) else [unit.raw]
        if not all(
            isinstance(r, dict) and isinstance(r.get("resourceSpans"), list) for r in requests
        ):
            reason = "not an OTLP/JSON trace request; expected an object with 'resourceSpans'"
            skipped.append(SkippedRecord(unit.id, f"{unit.where}: {reason}"))
            continue
        for request in requests:
            for span, resource in _otel_spans(request):
                traces.setdefault(str(span.get("traceId", "")), []).append((span, resource))
    yield from skipped
    for trace, spans in traces.items():
        where = f"{file}: trace {shown_id(trace)}"
        yield _read_one(lambda t=trace, s=spans: _otel_trace(file, t, s), trace, where)


def _otel_spans(request: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every span of a request, with its resource's attributes (malformed parts skipped)."""
    for resource in _objects(request.get("resourceSpans")):
        about = resource.get("resource")
        attrs = o.attribute_dict(about.get("attributes") if isinstance(about, dict) else None)
        for scope in _objects(resource.get("scopeSpans")):
            yield from ((s, attrs) for s in _objects(scope.get("spans")))


def _objects(value: Any) -> list[dict[str, Any]]:
    """The JSON objects of a list value; nothing for anything else."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _nanos(value: Any) -> int:
    """A span's ``startTimeUnixNano`` (a string or a number); 0 when it is neither."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _otel_trace(
    file: Path, trace: str, found: list[tuple[dict[str, Any], dict[str, Any]]]
) -> AuditRecord:
    """One trace as one record. Spans are read in start order: every model call (``chat``,
    ``text_completion``, ``generate_content``) is a step, whose new input messages (those
    after the last assistant turn of its input) and output travel in the step's messages
    and whose first tool call is its action (each further call a step of its own); an
    ``execute_tool`` span gives its call's result (and is a step of its own when no model
    call asked for it). The ``invoke_agent`` span's input messages go to the first step.
    ``gen_ai.evaluation.result`` events are kept in ``labels["verdicts"]``."""
    spans = sorted(
        found,
        key=lambda f: (_nanos(f[0].get("startTimeUnixNano")), f[0].get("parentSpanId") is not None),
    )
    attrs = [o.attribute_dict(span.get("attributes")) for span, _ in spans]
    agent = next((a for a in attrs if a.get(o.OPERATION) == o.INVOKE_AGENT), {})
    conversation = next((str(a[o.CONVERSATION]) for a in attrs if a.get(o.CONVERSATION)), trace)
    service = spans[0][1].get("service.name") if spans else None
    group = str(agent.get(o.AGENT_NAME) or service or file.stem)
    key = f"{file.name}:{conversation}"
    episode = _Episode(
        derive_id("import.otel", 1, key),
        str(agent.get("safactory.env") or f"otel:{group}")[:64],
        str(agent.get("safactory.task_id") or conversation)[:128],
    )
    steps: list[Step] = []
    here = f"{file}: trace {shown_id(trace)}"
    pending = _otel_messages(agent.get(o.INPUT_MESSAGES), f"{here}: invoke_agent")
    verdicts: list[dict[str, Any]] = []
    step_of_span: dict[str, int] = {}
    for (span, _), a in zip(spans, attrs, strict=True):
        operation = a.get(o.OPERATION)
        where = f"{here}: span {shown_id(span.get('spanId'))} ({shown_id(span.get('name'))})"
        if operation in o.MODEL_CALLS or (operation is None and o.OUTPUT_MESSAGES in a):
            heard = _otel_messages(a.get(o.INPUT_MESSAGES), where)
            said = [
                m for m in _otel_messages(a.get(o.OUTPUT_MESSAGES), where) if m.role == "assistant"
            ]
            last = max((i for i, m in enumerate(heard) if m.role == "assistant"), default=-1)
            for m in heard[last + 1 :]:
                if m.role == "tool":
                    _otel_result(steps, m.tool_call_id, o.text_of(m.content) or "")
                else:
                    pending.append(m)
            step_of_span[str(span.get("spanId"))] = len(steps)
            calls = [c for m in said for c in m.tool_calls or []]
            text = "\n".join(str(m.content) for m in said if m.content) or None
            steps.append(
                episode.step(
                    len(steps),
                    [*pending, *said],
                    Action(text=text, tool_call=calls[0] if calls else None),
                )
            )
            steps += [episode.step(len(steps), [], Action(tool_call=c)) for c in calls[1:]]
            pending = []
        elif operation == o.EXECUTE_TOOL or o.TOOL_NAME in a:
            name = a.get(o.TOOL_NAME)
            if not isinstance(name, str) or not name.strip():
                raise ImportFormatError(f"{where}: no '{o.TOOL_NAME}'")
            call_id = str(a.get(o.TOOL_CALL_ID) or f"call_{len(steps)}")
            result = o.text_of(a.get(o.TOOL_RESULT))
            if not _otel_result(steps, call_id, result, name):
                call = ToolCall(
                    id=call_id,
                    function=FunctionCall(
                        name=name.strip(), arguments=o.arguments_text(a.get(o.TOOL_ARGUMENTS))
                    ),
                )
                steps.append(episode.step(len(steps), pending, Action(tool_call=call), result))
                pending = []
            step_of_span[str(span.get("spanId"))] = len(steps) - 1
        for event in _objects(span.get("events")):
            if event.get("name") == o.EVALUATION_EVENT:
                found_attrs = o.attribute_dict(event.get("attributes"))
                index = found_attrs.get(
                    "safactory.verdict.step_index", step_of_span.get(str(span.get("spanId")))
                )
                verdicts.append({**found_attrs, "step_index": index})
    if not steps:
        raise ImportFormatError(f"{here}: no model call or tool span to read")
    unsafe = agent.get("safactory.unsafe")
    return AuditRecord(
        id=conversation,
        key=key,
        source="otel",
        steps=steps,
        unsafe=unsafe if isinstance(unsafe, bool) else None,
        group=group,
        labels={"trace_id": trace, "verdicts": verdicts} if verdicts else {"trace_id": trace},
    )


def _otel_messages(value: Any, where: str) -> list[ChatMessage]:
    """The messages of a GenAI message attribute (JSON text, or already a list)."""
    if value is None:
        return []
    try:
        items = json.loads(value) if isinstance(value, str) else value
    except ValueError as exc:
        raise ImportFormatError(f"{where}: message attribute is not JSON ({exc})") from None
    if not isinstance(items, list):
        raise ImportFormatError(f"{where}: message attribute must be a JSON list of messages")
    try:
        return [o.from_parts(m) for m in items]
    except (ValueError, ValidationError) as exc:
        raise ImportFormatError(f"{where}: {' '.join(str(exc).split())[:200]}") from None


def _otel_result(
    steps: list[Step], call_id: str | None, result: str | None, name: str | None = None
) -> bool:
    """Give ``result`` to the step whose tool call is ``call_id`` (latest first); False if
    no step made that call."""
    for index in range(len(steps) - 1, -1, -1):
        call = steps[index].action.tool_call
        if call is not None and call.id == call_id and (name is None or call.function.name == name):
            if result and not steps[index].tool_result:
                _add_result(steps, index, result)
            return True
    return False


def iter_steps(records: list[AuditRecord]) -> Iterator[Step]:
    """Every step of every record, in order (what ``safactory import`` publishes)."""
    for record in records:
        yield from record.steps
