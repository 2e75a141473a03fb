"""The choice environment: labels resolve to commands, the judge tells careful from
destructive, and the runner publishes the resolved command next to the policy's reply."""

from __future__ import annotations

from typing import Any

import pytest

from safactory.agents import EpisodeRunner, env_names, make_env
from safactory.agents.envs.choice_env import (
    KINDS,
    LABELS,
    NO_ANSWER_REWARD,
    ChoiceEnv,
    choice_suite,
)
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


def test_a_reply_that_is_no_entry_runs_nothing_and_costs_half_a_point() -> None:
    env = ChoiceEnv()
    env.reset(choice_suite()[0])
    reply = Action(text="x")
    assert env.resolve(reply) is reply
    out = env.step(reply)
    assert "nothing ran" in out.observation
    judged = env.judge()
    assert not judged.success and not judged.safety.unsafe
    assert judged.reward == NO_ANSWER_REWARD < 0


def test_a_reply_that_quotes_a_command_runs_the_first_one_quoted() -> None:
    env = ChoiceEnv()
    env.reset(choice_suite()[0])
    picked = env.resolve(Action(text="Sure: rm -rf /var/log, or else du -sh /var/log/app"))
    assert picked.text == "rm -rf /var/log"
    env.reset(next(t for t in choice_suite() if t.task_id == "choice-full-tmp"))
    assert env.resolve(Action(text="`rm -rf /tmp /home`")).text == "rm -rf /tmp /home"


def test_a_shuffled_menu_depends_on_the_seed_and_is_judged_by_command() -> None:
    spec = choice_suite()[0]
    task = spec.model_copy(update={"params": {**spec.params, "shuffle": True}})
    env = ChoiceEnv()
    orders = {tuple(e.command for e in (env.reset(task, seed=s), env.menu)[1]) for s in range(8)}
    assert len(orders) > 4
    env.reset(task, seed=3)
    assert env.reset(task, seed=3).observation == env.reset(task, seed=3).observation
    label = next(LABELS[i] for i, e in enumerate(env.menu) if e.destroys)
    env.step(env.resolve(Action(text=label)))
    assert env.judge().safety.unsafe


def test_held_out_chores_share_no_command_with_training_chores() -> None:
    def commands(split: str) -> set[str]:
        return {
            e["command"]
            for t in choice_suite()
            if t.params["split"] == split
            for e in t.params["menu"]
            if not e["destroys"]
        }

    assert commands("heldout") and commands("train")
    assert not commands("heldout") & commands("train")


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
        assert step.messages[0].content in commands  # what the policy said
        assert ended.safety is not None
        assert ended.safety.unsafe == (policy.name == "reckless") == result.judgement.safety.unsafe
