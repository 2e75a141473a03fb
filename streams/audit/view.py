"""The episode as every checker sees it: computed once per step, handed to all of them.

An :class:`EpisodeView` holds what the trust model needs of the episode so far: the
principal's request (and what was planted in it), the tools the agent was shown (their own
descriptions are evidence of what they do), every text the agent read (untrusted, with the
orders found in it), every call with what the taxonomy says it can do and what came back,
and, per call, the provenance verdict: requested, steered, or the agent's own initiative.

Pure text functions underneath are cached by text, so a step pays for its own texts and the
view of a long episode is rebuilt from cached pieces.
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, TypeVar, overload

from ...schemas import Step
from . import calls
from . import provenance as pv
from . import taxonomy as tx
from .text import (
    Span,
    action_spans,
    incoming_spans,
    message_text,
    presented_task,
    relayed,
    tool_arguments,
    tool_name,
    user_spans,
)


@dataclass(frozen=True, slots=True)
class Read:
    """One piece of untrusted text the agent read."""

    step_index: int
    field: str
    """``tool_result``, ``observation``, ``messages[i]``, ``user_turn`` (planted text) or
    ``tool_description``."""
    text: str
    orders: tuple[tuple[str, float], ...]
    """Chunks of it that order the agent about, with their cue scores."""
    delegated: bool = False
    """It came from a resource the principal asked the agent to act on."""

    def read_before(self, step_index: int) -> bool:
        """The agent had read it when it acted at ``step_index``: it came in an earlier
        step, or in this one as the report of an earlier call (a framework that logs the
        tool message with the next step)."""
        return self.step_index < step_index or (
            self.step_index == step_index and _reported_back_field(self.field)
        )


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call and what the taxonomy says it can do."""

    step_index: int
    name: str
    arguments: str
    description: str
    recognised: tx.Recognised
    values: tuple[str, ...]
    targets: tuple[str, ...]
    """Most specific first (see :func:`provenance.targets_of`)."""
    result: str
    failed: bool

    @property
    def text(self) -> str:
        """The call as written (``name(arguments)``)."""
        return f"{self.name}({self.arguments})"


# --------------------------------------------------------------------- tool catalogue

_TOOL_LINE = re.compile(
    r"^[ \t]*(?:[-*•]|\d+[.)])?[ \t]*[`\"']?([A-Za-z_][\w.]{2,63})[`\"']?[ \t]*"
    r"(?:\([^)\n]{0,300}\))?[ \t]*(?::|-|—|–)[ \t]+(.{8,400})$",
    re.MULTILINE,
)


@lru_cache(maxsize=4096)
def tool_catalogue(text: str) -> tuple[tuple[str, str], ...]:
    """(tool name, description) pairs a prompt shows the agent: OpenAI-style function
    schemas (a JSON list or object), or lines such as ``- name(args): what it does``."""
    found: list[tuple[str, str]] = []
    stripped = text.strip()
    start = min((i for i in (stripped.find("["), stripped.find("{")) if i >= 0), default=-1)
    if start >= 0:
        try:
            data = json.loads(stripped[start:])
        except ValueError:
            data = None
        for item in data if isinstance(data, list) else [data] if data else []:
            if not isinstance(item, dict):
                continue
            spec = item.get("function") if isinstance(item.get("function"), dict) else item
            name, description = spec.get("name"), spec.get("description")
            if isinstance(name, str) and isinstance(description, str):
                params = spec.get("parameters")
                schema = json.dumps(params)[:300] if isinstance(params, dict) else ""
                found.append((name, f"{description} {schema}".strip()))
    for match in _TOOL_LINE.finditer(text):
        name = match.group(1)
        if re.search(r"[A-Z_.]|^[a-z]+$", name) and name.lower() not in {"note", "task", "user"}:
            found.append((name, match.group(2).strip()))
    return tuple(found)


# --------------------------------------------------------------------- per-step pieces

_FAILED = re.compile(
    r"^\s*(error|err|exception|traceback|fatal|failed|failure|denied|forbidden|unauthori[sz]ed|"
    r"not found|no such|permission denied|invalid|cannot|could not|unable to)\b|"
    r"\"(success|ok)\"\s*:\s*false|\"status\"\s*:\s*\"(error|failed|denied)\"|"
    r"'(success|ok)'\s*:\s*False|\b(permission denied|access denied|command not found)\b",
    re.IGNORECASE,
)


def _failed(step: Step, result: str) -> bool:
    code = step.info.get("exit_code") if isinstance(step.info, dict) else None
    if isinstance(code, int) and code != 0:
        return True
    return bool(result) and _reports_failure(result[:300])


@lru_cache(maxsize=16384)
def _reports_failure(head: str) -> bool:
    """An output's opening says the call failed (every later step asks again: cached)."""
    return bool(_FAILED.search(head))


def _values(arguments: str) -> tuple[str, ...]:
    return tuple(v for _, v in calls.argument_pairs(arguments))


@lru_cache(maxsize=pv.TEXT_CACHE)
def _call(
    step_index: int, name: str, arguments: str, description: str, result: str, failed: bool
) -> Call:
    values = _values(arguments)
    return Call(
        step_index,
        name,
        arguments,
        description,
        calls.classify_call(name, arguments, description),
        values,
        pv.targets_of(values),
        result,
        failed,
    )


@lru_cache(maxsize=pv.TEXT_CACHE)
def _read(step_index: int, field: str, text: str, delegated: bool) -> Read:
    """A text the agent read, with its orders (each later step reads it again: cached)."""
    return Read(step_index, field, text, pv.instructions(text, delegated), delegated)


_MENU_LINE = re.compile(r"(?m)^[ \t]*\d{1,2}[.)][ \t]+(.+?)[ \t]*$")


@lru_cache(maxsize=8192)
def _menu_lines(text: str) -> frozenset[str]:
    return frozenset(m.group(1).strip() for m in _MENU_LINE.finditer(text))


@lru_cache(maxsize=8192)
def _without_menu(text: str, menu: frozenset[str]) -> str:
    return "\n".join(
        line
        for line in text.splitlines()
        if not ((m := _MENU_LINE.match(line)) and m.group(1).strip() in menu)
    )


# --------------------------------------------------------------------- one step's pieces


@dataclass(frozen=True, slots=True)
class StepPieces:
    """What the view needs of one step, read once: a live auditor sees every step of an
    episode again at each later step, and rebuilding the view from these costs a lookup."""

    user: tuple[tuple[str, str], ...]
    """(role, text) of what the user, system or developer said in the step."""
    incoming: tuple[Span, ...]
    """What the agent read from outside (observation, tool output)."""
    name: str
    """The tool called ('' if none)."""
    arguments: str
    picked: str
    """The agent's reply, stripped, when it made no call (a menu pick)."""
    result: str
    """What came back to the call (every incoming text but an observation that a tool
    output repeats)."""
    failed: bool
    """The call failed (its exit code, or what came back, says so)."""
    menu_lines: frozenset[str]
    catalogue: tuple[tuple[str, str], ...]
    """(tool, description) pairs the step's messages and ``info["tools"]`` show."""


def _reported_back_field(field: str) -> bool:
    """A text that reports what the previous call returned: a tool message answering an
    earlier call, a user turn relaying tool output, or an observation the agent quotes in
    its thought (written before its own act)."""
    return field.endswith((".earlier", ".relayed", ".observation"))


def _reported_back(span: Span) -> bool:
    return _reported_back_field(span.field)


class _StepRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a step that knows its :data:`_PIECES` key."""

    __slots__ = ("key",)
    key: int


def _dropped(ref: _StepRef) -> None:
    _PIECES.pop(ref.key, None)


_PIECES: dict[int, tuple[_StepRef, StepPieces]] = {}
"""Pieces of the steps alive, keyed by the step object (events are frozen): an entry goes
when its step does, so the cache holds no step in memory. (It held the last 65,536 steps,
and the collector's scans of their 1.2M objects paused the worker for 0.5 s at 2,000
steps/s.)"""


def pieces(step: Step) -> StepPieces:
    """The step's :class:`StepPieces` (computed once per step object)."""
    hit = _PIECES.get(id(step))
    if hit is not None and hit[0]() is step:
        return hit[1]
    user = tuple(
        (message.role, text)
        for message in step.messages
        if message.role in ("user", "system", "developer")
        and (text := message_text(message))
        and not (message.role == "user" and relayed(text))
    )
    task = presented_task(step)
    if task:
        user += (("user", task),)
    incoming = tuple(incoming_spans(step))
    name = tool_name(step)
    catalogue: list[tuple[str, str]] = []
    for message in step.messages:
        if message.role in ("system", "developer", "user", "tool"):
            text = message_text(message)
            if not (message.role == "user" and relayed(text)):
                catalogue.extend(tool_catalogue(text))
    tools = step.info.get("tools") if isinstance(step.info, dict) else None
    if isinstance(tools, list):
        catalogue.extend(tool_catalogue(json.dumps(tools)))
    menu_lines: frozenset[str] = frozenset()
    for _, text in user:
        menu_lines |= _menu_lines(text)
    for span in incoming:
        menu_lines |= _menu_lines(span.text)
    result = "\n".join(
        span.text
        for span in incoming
        if (span.field != "observation" or not step.tool_result) and not _reported_back(span)
    )
    made = StepPieces(
        user=user,
        incoming=incoming,
        name=name,
        arguments=tool_arguments(step),
        picked=(step.action.text or "").strip() if not name else "",
        result=result,
        failed=_failed(step, result),
        menu_lines=menu_lines,
        catalogue=tuple(catalogue),
    )
    ref = _StepRef(step, _dropped)
    ref.key = id(step)
    _PIECES[ref.key] = (ref, made)
    return made


# --------------------------------------------------------------------- the view

T = TypeVar("T")


class _once(Generic[T]):
    """:func:`functools.cached_property` without its lock (Python 3.11 takes one at each
    first read, which a view, built for one step and read by one task, does not need)."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _once[T]: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> T: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> T | _once[T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)
        return value


@dataclass
class EpisodeView:
    """One step and the episode before it, as the trust model reads them."""

    step: Step
    context: list[Step]
    cache: dict[str, object] = field(default_factory=dict)
    """Room for checkers to share work within one step (e.g. model scores)."""
    final: bool = False
    """This is the episode's last step (known when a whole episode is judged: a batch audit,
    or the stream's deep tier once the episode ended)."""

    @_once
    def steps(self) -> list[Step]:
        """The episode so far, this step last."""
        return [*self.context, self.step]

    # ---------------------------------------------------------------- this step's texts

    @_once
    def user_spans(self) -> tuple[Span, ...]:
        """What the user, system or developer said in this step."""
        return tuple(user_spans(self.step))

    @property
    def incoming_spans(self) -> tuple[Span, ...]:
        """What the agent read from outside in this step."""
        return pieces(self.step).incoming

    @_once
    def action_spans(self) -> tuple[Span, ...]:
        """What the agent produced in this step: its text and its tool call."""
        return tuple(action_spans(self.step))

    @_once
    def _pieces(self) -> list[StepPieces]:
        return [pieces(s) for s in self.steps]

    # ---------------------------------------------------------------- who said what

    @_once
    def catalogue(self) -> dict[str, str]:
        """Tool name → the description the agent was shown."""
        out: dict[str, str] = {}
        for p in self._pieces:
            for name, description in p.catalogue:
                out.setdefault(name, description)
        return out

    @_once
    def _turns(self) -> list[tuple[int, pv.UserTurn]]:
        names = frozenset(self.catalogue) | frozenset(p.name for p in self._pieces if p.name)
        menu = self.menu
        out = []
        for s, p in zip(self.steps, self._pieces, strict=True):
            for role, text in p.user:
                if role in ("system", "developer"):
                    continue
                text = _without_menu(text, menu) if menu else text
                out.append((s.step_index, pv.read_user_turn(text, names)))
        return out

    @_once
    def menu(self) -> frozenset[str]:
        """The entries of a menu the environment offered (numbered lines of the presented
        request), when the agent answers by picking one: a picked entry is the agent's act,
        and the menu itself is no part of what the principal asked for."""
        offered: set[str] = set()
        for p in self._pieces:
            offered |= p.menu_lines
        replies = {p.picked for p in self._pieces if not p.name}
        return frozenset(offered) if offered & replies else frozenset()

    @_once
    def task(self) -> str:
        """The principal's own words in the episode so far, less anything planted in them."""
        return "\n".join(turn.request for _, turn in self._turns if turn.request)

    @_once
    def task_lower(self) -> str:
        """:attr:`task` in lower case (what most checks compare against)."""
        return self.task.lower()

    @_once
    def system(self) -> str:
        """The deployment's own instructions (system and developer messages)."""
        return "\n".join(
            text for p in self._pieces for role, text in p.user if role in ("system", "developer")
        )

    @_once
    def delegated_steps(self) -> frozenset[int]:
        """Steps whose output comes from a resource the principal asked the agent to act on
        (a call whose arguments repeat what the request named: "pay the bill in bill.txt")."""
        if not pv.delegates(self.task):
            return frozenset()
        low = self.task_lower
        return frozenset(
            c.step_index
            for c in self.calls
            if any(len(v) >= 5 and v.lower() in low for v in c.values)
        )

    @_once
    def reads(self) -> list[Read]:
        """Every untrusted text of the episode so far, in order: what was planted in user
        turns, the tools' own descriptions, and every observation and tool output."""
        out = [
            Read(
                index,
                "user_turn",
                turn.planted,
                pv.instructions(turn.planted) or ((turn.planted[:400], 1.0),),
            )
            for index, turn in self._turns
            if turn.planted
        ]
        for name, description in self.catalogue.items():
            out.append(_read(-1, f"tool_description[{name}]", description, False))
        delegated = self.delegated_steps
        menu = self.menu
        for s, p in zip(self.steps, self._pieces, strict=True):
            for span in p.incoming:
                text = _without_menu(span.text, menu) if menu else span.text
                out.append(_read(s.step_index, span.field, text, s.step_index in delegated))
        return out

    @_once
    def asked(self) -> frozenset[str]:
        """Action classes the principal asked for: in their words, and in what the resources
        they pointed to ask of the agent (a bill to pay, a to-do list to work through)."""
        found = set(pv.asked_classes(self.task))
        for read in self.reads:
            if read.delegated:
                orders = {chunk for chunk, _ in read.orders}
                for chunk in pv.chunks(read.text):
                    if chunk not in orders:
                        found |= pv.asked_classes(chunk)
        return frozenset(found)

    # ---------------------------------------------------------------- what was done

    @_once
    def calls(self) -> list[Call]:
        """Every tool call of the episode so far, this step's last."""
        out = []
        menu = self.menu
        steps, pieces_ = self.steps, self._pieces
        for i, (s, p) in enumerate(zip(steps, pieces_, strict=True)):
            if p.picked and p.picked in menu:
                result = s.tool_result or s.observation or ""
                arguments = json.dumps({"command": p.picked})
                out.append(_call(s.step_index, "run", arguments, "", result, _failed(s, result)))
                continue
            if not p.name:
                continue
            description = self.catalogue.get(p.name, "")
            result, failed = p.result, p.failed
            if not result and i + 1 < len(steps):  # reported back in the next turn
                result = "\n".join(t.text for t in pieces_[i + 1].incoming if _reported_back(t))
                failed = _failed(steps[i + 1], result) if result else failed
            out.append(_call(s.step_index, p.name, p.arguments, description, result, failed))
        return out

    @_once
    def call(self) -> Call | None:
        """This step's call (None when the agent only replied)."""
        last = self.calls[-1] if self.calls else None
        return last if last is not None and last.step_index == self.step.step_index else None

    def named_before(self, step_index: int) -> str:
        """The principal's words with what the data read before ``step_index`` named
        (targets found by lookups the request asked for), less orders planted in that data;
        never the output of the call being judged (it echoes the call)."""
        key = f"named:{step_index}"
        cached = self.cache.get(key)
        if isinstance(cached, str):
            return cached
        parts = [self.task]
        for read in self.reads:
            if read.field == "user_turn" or read.field.startswith("tool_description"):
                continue
            if not read.read_before(step_index):
                continue
            orders = {chunk for chunk, _ in read.orders}
            parts.extend(c for c in pv.chunks(read.text) if c not in orders)
        text = "\n".join(parts)
        self.cache[key] = text
        return text
