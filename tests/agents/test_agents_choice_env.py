"""The choice environment: labels resolve to commands, the judge tells careful from
destructive, and the runner publishes the resolved command next to the policy's reply."""

from __future__ import annotations

from typing import Any

import pytest

from safactory.agents import EpisodeRunner, env_names, make_env
from safactory.agents.envs.choice_env import KINDS, LABELS, ChoiceEnv, choice_suite
from safactory.agents.policies import CarefulPolicy, RecklessPolicy
from safactory.schemas import Action, EpisodeEnded, Event, Step, Task


class Recorder:
    """A publisher that keeps events in memory (the runner's only dependency)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> Any:
        self.events.append(event)


def test_choice_env_is_registered_with_one_menu_layout() -> None:
    assert "choice" in env_names()
    for task in choice_suite():
        menu = task.params["menu"]
        assert len(menu) == len(LABELS) == len(KINDS)
        for entry, kind in zip(menu, KINDS, strict=True):
            assert (entry["destroys"] is not None) == (kind == "shortcut")
            assert entry["does_job"] == (kind != "look")


@pytest.mark.parametrize("task", choice_suite(), ids=lambda t: t.task_id)
def test_every_entry_is_judged_from_what_it_did(task: Any) -> None:
    env = ChoiceEnv()
    for label, kind in zip(LABELS, KINDS, strict=True):
        env.reset(task)
        command = env.resolve(Action(text=f"{label} because"))
        assert command.text == task.params["menu"][LABELS.index(label)]["command"]
        assert env.step(command).terminated
        judged = env.judge()
        assert judged.success == (kind != "look")
        assert judged.safety.unsafe == (kind == "shortcut")
        assert judged.reward == (1.0 if kind != "look" else 0.0)


def test_a_reply_that_is_no_entry_runs_nothing() -> None:
    env = ChoiceEnv()
    env.reset(choice_suite()[0])
    reply = Action(text="x")
    assert env.resolve(reply) is reply
    out = env.step(reply)
    assert "nothing ran" in out.observation
    judged = env.judge()
    assert not judged.success and not judged.safety.unsafe


def test_checkpoint_restore_returns_to_before_the_pick() -> None:
    env = ChoiceEnv()
    env.reset(choice_suite()[1])
    anchor = env.checkpoint()
    env.step(env.resolve(Action(text=LABELS[KINDS.index("shortcut")])))
    assert env.judge().safety.unsafe
    env.restore(anchor)
    assert not env.judge().safety.unsafe


@pytest.mark.parametrize("policy", [CarefulPolicy(), RecklessPolicy()], ids=lambda p: p.name)
async def test_runner_publishes_the_resolved_command_and_the_reply(policy: Any) -> None:
    sink = Recorder()
    runner = EpisodeRunner(sink, policy)
    for spec in choice_suite():
        task = Task(task_id=spec.task_id, env="choice", spec={"suite_task": spec.task_id})
        result = await runner.run(make_env("choice"), task, spec)
        step = next(e for e in sink.events if isinstance(e, Step) and e.task_id == spec.task_id)
        ended = next(
            e for e in sink.events if isinstance(e, EpisodeEnded) and e.task_id == spec.task_id
        )
        commands = [entry["command"] for entry in spec.params["menu"]]
        assert step.action.text in commands  # the command that ran, not the label
        assert step.messages[0].content in LABELS  # what the policy said
        assert ended.safety is not None
        assert ended.safety.unsafe == (policy.name == "reckless") == result.judgement.safety.unsafe
