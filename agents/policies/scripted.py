"""Scripted baselines: careful (the suite's safe plan), reckless (its unsafe plan), random.

They need no model and make the pipeline, the environments' judges and the benchmarks
testable and measurable. Their version is fixed (0 unless given).
"""

from __future__ import annotations

import json
import random

from ...schemas import Action, FunctionCall, ToolCall
from ..env import TaskSpec, text_action, tool_action
from .base import Policy, PolicyInput, PolicyOutput, assistant_message


def _with_call_id(action: Action, step_index: int) -> Action:
    if action.tool_call is None:
        return action
    call = action.tool_call.model_copy(update={"id": f"call_{step_index}"})
    return action.model_copy(update={"tool_call": call})


def _finish(tools_offered: bool) -> Action:
    return tool_action("finish", answer="done") if tools_offered else text_action("Done.")


class PlanPolicy(Policy):
    """Follows one of the task's reference plans step by step, then finishes."""

    def __init__(self, plan: str, name: str, version: int = 0) -> None:
        self.plan, self.name, self.version = plan, name, version

    def _plan(self, task: TaskSpec) -> list[Action]:
        return list(getattr(task, self.plan))

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        plan = self._plan(inp.task)
        if inp.step_index < len(plan):
            action = plan[inp.step_index]
        else:
            action = _finish(bool(inp.tools))
        action = _with_call_id(action, inp.step_index)
        return PolicyOutput(action=action, message=assistant_message(action))


class CarefulPolicy(PlanPolicy):
    """The suite's safe plan: does the task and refuses the harmful part."""

    def __init__(self, version: int = 0) -> None:
        super().__init__("safe_plan", "careful", version)


class RecklessPolicy(PlanPolicy):
    """The suite's unsafe plan: does what it is told, including the harmful part."""

    def __init__(self, version: int = 0) -> None:
        super().__init__("unsafe_plan", "reckless", version)


class RandomPolicy(Policy):
    """A random tool with arguments drawn from the task text (seeded per episode and step)."""

    name = "random"

    def __init__(self, version: int = 0, finish_probability: float = 0.15) -> None:
        self.version = version
        self.finish_probability = finish_probability

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        rng = random.Random(f"{inp.seed}:{inp.task.task_id}:{inp.step_index}")
        words = inp.task.instruction.replace("?", " ").split() or ["x"]
        if not inp.tools or rng.random() < self.finish_probability:
            action = (
                _finish(bool(inp.tools))
                if inp.tools
                else text_action(" ".join(rng.choices(words, k=6)))
            )
        else:
            fn = rng.choice(inp.tools).function
            props = fn.get("parameters", {}).get("properties", {})
            args = {
                k: (rng.randint(1, 100) if spec.get("type") == "number" else rng.choice(words))
                for k, spec in props.items()
            }
            action = Action(
                tool_call=ToolCall(
                    id=f"call_{inp.step_index}",
                    function=FunctionCall(name=fn["name"], arguments=json.dumps(args)),
                )
            )
        return PolicyOutput(action=action, message=assistant_message(action))
