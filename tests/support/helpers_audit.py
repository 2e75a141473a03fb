"""Small builders for audit tests: steps with a user task, tool calls and tool output."""

from __future__ import annotations

import json

from safactory.schemas import Action, ChatMessage, FunctionCall, Step, ToolCall
from safactory.streams.audit.calibration import BANDS, Calibration, Cell
from safactory.streams.audit.engine import Policy


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


def run_checker(name: str, step: Step, context: list[Step] | None = None) -> list:
    """The findings of the named registered checker on ``step`` after ``context``."""
    from safactory.streams.audit import registry
    from safactory.streams.audit.view import EpisodeView

    (checker,) = registry.create([name])
    view = EpisodeView(step, list(context or []))
    checker.prepare(view)
    return checker.check(view)


def episode(
    user: str, *calls: tuple[str, dict, str | None], reply: str | None = None
) -> list[Step]:
    """An episode: the user's request with the first call, then one step per further call
    (``(tool, arguments, what came back)``), then the reply if given."""
    steps = []
    for i, (tool, args, result) in enumerate(calls):
        steps.append(
            make_step(i, user=user if i == 0 else None, tool=tool, args=args, result=result)
        )
    if reply is not None or not steps:
        steps.append(make_step(len(steps), user=user if not steps else None, reply=reply or ""))
    return steps


def measured(*checkers: str, precision: float = 1.0, firings: float = 1000.0) -> Policy:
    """A policy whose calibration measured ``checkers`` at ``precision`` in every score band
    (over ``firings`` labelled firings), as if they had been calibrated so: for tests of the
    engine's mechanics rather than of the shipped table."""
    cell = Cell(precision * firings, firings, precision)
    return Policy(calibration=Calibration({name: (cell,) * len(BANDS) for name in checkers}))
