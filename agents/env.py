"""The one environment protocol every simulation environment implements.

An environment is reset with a task and a seed, stepped with the agent's actions, and can
be checkpointed and restored exactly. It offers the task's prompt in OpenAI chat format and
the tools the agent may call, and it judges task success and the safety outcome from its
own state (files deleted, secret sent, money moved, stove left on), independently of any
auditor.
"""

from __future__ import annotations

import abc
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..schemas import Action, ChatMessage, FunctionCall, SafetyOutcome, ToolCall, ToolSchema


class TaskSpec(BaseModel):
    """One task of an environment's suite.

    ``kind`` says whether the task measures capability (doing the job) or safety (a trap
    or a harmful request). ``safe_plan`` and ``unsafe_plan`` are reference action
    sequences: the scripted baselines follow them, and tests use them to check that the
    environment's judgement tells a careful run from a reckless one.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    task_id: str = Field(min_length=1, max_length=128)
    kind: Literal["capability", "safety"]
    instruction: str
    risk: str | None = Field(default=None, description="what can go wrong, for safety tasks")
    max_steps: int = Field(default=20, ge=1)
    params: dict[str, Any] = Field(default_factory=dict, description="env-specific setup")
    safe_plan: list[Action] = Field(default_factory=list)
    unsafe_plan: list[Action] = Field(default_factory=list)


class ResetOutput(BaseModel):
    """What an environment hands the agent at the start of an episode."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    prompt: list[ChatMessage]
    tools: list[ToolSchema] = Field(default_factory=list)
    observation: str = ""
    choices: list[str] = Field(
        default_factory=list,
        description="when the action space is a menu: the reply that picks each entry (a "
        "policy may choose among them instead of generating freely)",
    )


class StepOutput(BaseModel):
    """The result of one action (gymnasium-style, plus the turns it adds to the chat)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    tool_result: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class Judgement(BaseModel):
    """Ground truth from the environment's own state: did the task succeed, was it safe."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    success: bool
    reward: float
    safety: SafetyOutcome


@dataclass(frozen=True)
class Anchor:
    """A checkpoint: an opaque handle that :meth:`Environment.restore` accepts.

    ``step_index`` is the number of steps taken when it was made; ``state`` is owned by the
    environment that made it (a deep copy of Python state, frozen overlay layers, …).
    """

    env: str
    step_index: int
    state: Any = field(repr=False)


class EnvError(RuntimeError):
    """An environment could not do what was asked; the message says what and how to fix."""


class Environment(abc.ABC):
    """Base of every environment. Subclasses implement the abstract methods.

    Register a subclass with ``@register_env("name")`` (see :mod:`.registry`); that one
    file is all a new environment needs.
    """

    name: ClassVar[str] = ""
    """Registry name, set by :func:`register_env`."""
    blocking: ClassVar[bool] = False
    """True when steps block on I/O (subprocesses): the runner calls them in a thread."""

    def __init__(self) -> None:
        self.task: TaskSpec | None = None
        self.steps_taken = 0

    @classmethod
    @abc.abstractmethod
    def suite(cls) -> list[TaskSpec]:
        """The environment's built-in tasks (capability and safety)."""

    @abc.abstractmethod
    def reset(self, task: TaskSpec, seed: int = 0) -> ResetOutput:
        """Start an episode of ``task``; deterministic for a given ``seed``."""

    def resolve(self, action: Action) -> Action:
        """The concrete action a policy's reply stands for (default: the reply itself).

        Environments whose action space is a menu map a label to the command it names, so
        the guard, the auditors and the step log all see what will actually run.
        """
        return action

    @abc.abstractmethod
    def step(self, action: Action) -> StepOutput:
        """Apply one agent action."""

    @abc.abstractmethod
    def judge(self) -> Judgement:
        """Task success and safety outcome, judged from the current state."""

    @abc.abstractmethod
    def checkpoint(self) -> Anchor:
        """Freeze the current state; :meth:`restore` returns to it exactly."""

    @abc.abstractmethod
    def restore(self, anchor: Anchor) -> None:
        """Return to ``anchor``: everything the agent could observe is as it was then."""

    def close(self) -> None:  # noqa: B027 - environments without resources need nothing
        """Release resources (processes, mounts, files)."""

    def healthy(self) -> bool:
        """Whether the environment can run another episode (the pool replaces it if not)."""
        return True

    def branch(self, anchor: Anchor, n: int) -> list[Environment]:
        """``n`` new environments, each restored to ``anchor``, to explore alternatives.

        The caller owns (and closes) the returned environments.
        """
        if anchor.env != self.name:
            raise EnvError(f"anchor belongs to env {anchor.env!r}, not {self.name!r}")
        children = []
        for _ in range(n):
            child = self.fork()
            child.restore(anchor)
            children.append(child)
        return children

    def fork(self) -> Environment:
        """A fresh environment of the same kind and task, ready to :meth:`restore` into."""
        child = type(self)()
        if self.task is not None:
            child.reset(self.task)
        return child

    def __enter__(self) -> Environment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def tool(name: str, description: str, **properties: dict[str, Any]) -> ToolSchema:
    """An OpenAI tool schema whose arguments are all required: ``tool("shell", "...",
    command={"type": "string"})``."""
    return ToolSchema(
        function={
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        }
    )


def call_arguments(action: Action) -> tuple[str | None, dict[str, Any]]:
    """The tool name and parsed arguments of an action (``(None, {})`` for plain text).

    Malformed JSON arguments raise :class:`EnvError` naming the tool.
    """
    if action.tool_call is None:
        return None, {}
    fn = action.tool_call.function
    try:
        args = json.loads(fn.arguments or "{}")
    except json.JSONDecodeError as exc:
        raise EnvError(f"tool {fn.name!r}: arguments are not valid JSON ({exc})") from None
    if not isinstance(args, dict):
        raise EnvError(f"tool {fn.name!r}: arguments must be a JSON object")
    return fn.name, args


def tool_action(name: str, call_id: str = "call_0", **arguments: Any) -> Action:
    """An :class:`Action` calling tool ``name`` with ``arguments`` (for plans and tests)."""
    return Action(
        tool_call=ToolCall(
            id=call_id, function=FunctionCall(name=name, arguments=json.dumps(arguments))
        )
    )


def text_action(text: str) -> Action:
    """An :class:`Action` that only says ``text``."""
    return Action(text=text)
