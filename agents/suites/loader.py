"""Task suites are data: ``agents/suites/data/<suite>.json``, validated when loaded.

A suite file holds ``suite`` (its name, the file's stem), ``description``, ``env`` (what
the environment needs besides its tasks: a house, accounts, a home directory; the suite's
module validates it with a model of its own) and ``tasks``. A task has the fields of
:class:`~safactory.agents.env.TaskSpec`; its plans are lists of actions, each written as
``{"tool": name, "args": {...}}`` or ``{"text": "..."}``. Every error is one line naming
the file, the task and the field.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...schemas import Action, FunctionCall, ToolCall
from ..env import TaskSpec

DATA: Traversable = files(__package__) / "data"
"""Where the suite files live (package data: present in editable and wheel installs)."""


class SuiteError(ValueError):
    """A suite file cannot be used: the message names the file, the task and the field."""


class PlannedAction(BaseModel):
    """One action of a reference plan: a tool call or a text reply."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str | None = Field(default=None, min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    text: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> PlannedAction:
        if (self.tool is None) == (self.text is None):
            raise ValueError("an action has either 'tool' (with 'args') or 'text'")
        if self.text is not None and self.args:
            raise ValueError("'args' belongs to a 'tool' action, not a 'text' one")
        return self

    def action(self) -> Action:
        """The :class:`Action` this entry stands for (tool calls get id ``call_0``)."""
        if self.tool is None:
            return Action(text=self.text)
        call = FunctionCall(name=self.tool, arguments=json.dumps(self.args))
        return Action(tool_call=ToolCall(id="call_0", function=call))


class _Plans(BaseModel):
    model_config = ConfigDict(extra="allow")
    safe_plan: list[PlannedAction] = Field(default_factory=list)
    unsafe_plan: list[PlannedAction] = Field(default_factory=list)


class SuiteFile(BaseModel):
    """The top level of a suite file (tasks are checked one by one, see :func:`read_suite`)."""

    model_config = ConfigDict(extra="forbid")
    suite: str = Field(min_length=1)
    description: str
    env: dict[str, Any] = Field(default_factory=dict)
    tasks: list[dict[str, Any]] = Field(min_length=1)


def read_suite(path: Traversable) -> tuple[SuiteFile, list[TaskSpec]]:
    """Parse and validate one suite file: its top level and its tasks, in file order."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        known = ", ".join(sorted(p.name for p in DATA.iterdir() if p.name.endswith(".json")))
        raise SuiteError(f"{path}: no such suite file (installed: {known})") from None
    except json.JSONDecodeError as exc:
        raise SuiteError(f"{path}: not JSON: {exc}; fix the file") from None
    try:
        suite = SuiteFile.model_validate(raw)
    except ValidationError as exc:
        raise _error(path, None, exc) from None
    if suite.suite != path.name.removesuffix(".json"):
        raise SuiteError(
            f"{path}: field 'suite' is {suite.suite!r}, not the file's stem; fix the file"
        )
    tasks: list[TaskSpec] = []
    where: dict[str, int] = {}
    for index, entry in enumerate(suite.tasks):
        name = str(entry.get("task_id") or f"#{index}")
        try:
            plans = _Plans.model_validate(entry)
            task = TaskSpec.model_validate(
                {
                    **entry,
                    "safe_plan": [a.action() for a in plans.safe_plan],
                    "unsafe_plan": [a.action() for a in plans.unsafe_plan],
                }
            )
        except ValidationError as exc:
            raise _error(path, name, exc) from None
        if task.task_id in where:
            raise SuiteError(
                f"{path}: task {name!r}: field 'task_id' repeats the id of task "
                f"#{where[task.task_id]}; fix the file"
            )
        where[task.task_id] = index
        tasks.append(task)
    return suite, tasks


def load_tasks(name: str) -> list[TaskSpec]:
    """The tasks of the installed suite ``name`` (copies: a caller may change them)."""
    return [task.model_copy(deep=True) for task in _installed(name)[1]]


def load_env(name: str, model: type[BaseModel]) -> dict[str, Any]:
    """The ``env`` block of the installed suite ``name`` as written, once ``model`` accepted
    it (a copy: a caller may change it)."""
    return copy.deepcopy(_checked_env(name, model))


@functools.cache
def _installed(name: str) -> tuple[dict[str, Any], tuple[TaskSpec, ...]]:
    suite, tasks = read_suite(DATA / f"{name}.json")
    return suite.env, tuple(tasks)


@functools.cache
def _checked_env(name: str, model: type[BaseModel]) -> dict[str, Any]:
    env = _installed(name)[0]
    try:
        model.model_validate(env)
    except ValidationError as exc:
        raise _error(DATA / f"{name}.json", None, exc, prefix="env") from None
    return env


def _error(
    path: Traversable, task: str | None, exc: ValidationError, prefix: str = ""
) -> SuiteError:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in (prefix, *first["loc"]) if p != "") or "<top level>"
    where = f"task {task!r}: " if task is not None else ""
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return SuiteError(f"{path}: {where}field {field!r}: {first['msg']}{more}; fix the file")
