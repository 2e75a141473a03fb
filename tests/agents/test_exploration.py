"""Exploration from safety anchors, on the real broker: a flagged action's anchor is restored
into K branches, each an episode naming its parent and step, the siblings one group that the
assembler keeps together (the trainer's group-relative advantages compare them)."""

from __future__ import annotations

import asyncio
import random
import re
import uuid

import pytest

from safactory.agents.env import TaskSpec, text_action
from safactory.agents.envs.choice_env import ChoiceEnv
from safactory.agents.explore import Exploration, anchor_group
from safactory.agents.guard import PatternGuard
from safactory.agents.policies import Policy, PolicyInput, PolicyOutput
from safactory.agents.policies.base import assistant_message
from safactory.agents.runner import EpisodeRunner
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import EpisodeEnded, EpisodeStarted, Step, Task, Trajectory
from safactory.streams.assembly.fold import AssemblerConfig
from safactory.streams.assembly.worker import AssemblerWorker
from safactory.trainer.advantages import group_relative_advantages

SHORTCUTS = r"rm -rf|mkfs|dd if=|kill -9|killall|shutdown|DROP|TRUNCATE|reboot"


class _Sampler(Policy):
    """Picks a menu entry at random, seeded by the episode's seed (like a menu LM)."""

    name = "sampler"

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        action = text_action(random.Random(inp.seed).choice(inp.choices))
        return PolicyOutput(action=action, message=assistant_message(action))


async def _read(settings: Settings, topic: str, count: int) -> list:
    seen: list = []

    async def keep(d: Delivery) -> None:
        seen.append(d.event)

    consumer = EventConsumer([topic], f"r-{uuid.uuid4().hex[:8]}", handler=keep, settings=settings)
    async with consumer:
        async with asyncio.timeout(60):
            while len(seen) < count:
                await consumer.poll_once(timeout_ms=300)
    return seen


@pytest.mark.integration
async def test_a_flagged_step_is_branched_into_sibling_episodes(
    topics: Settings, producer: EventProducer
) -> None:
    spec = next(t for t in ChoiceEnv.suite() if t.task_id == "choice-stale-lock")
    spec = spec.model_copy(update={"params": {**spec.params, "shuffle": True}})
    flagger = PatternGuard([SHORTCUTS])
    runner = EpisodeRunner(producer, _Sampler(), exploration=Exploration(4, flagger=flagger))
    env = ChoiceEnv()
    seed = next(  # an episode whose own pick is a destructive shortcut
        s for s in range(100) if re.search(SHORTCUTS, random.Random(s).choice(_menu(spec, s)))
    )
    task = Task(task_id="t-explore", env="choice", seed=seed, group_id="g-explore")
    result = await runner.run(env, task, spec, episode_id="parent")
    assert result.judgement is not None and result.judgement.safety.unsafe
    assert len(result.branches) == 4
    group = anchor_group("parent", 0)

    events = await _read(topics, "episodes", 2 * 5)
    started = {e.episode_id: e for e in events if isinstance(e, EpisodeStarted)}
    ended = {e.episode_id: e for e in events if isinstance(e, EpisodeEnded)}
    branches = [e for e in started.values() if e.parent_episode_id == "parent"]
    assert sorted(b.episode_id for b in branches) == sorted(r.episode_id for r in result.branches)
    assert {(b.branch_step, b.group_id) for b in branches} == {(0, group)}
    assert len({b.seed for b in branches}) == 4 and seed not in {b.seed for b in branches}
    assert all(b.prompt == started["parent"].prompt for b in branches)  # the anchor's chat
    assert all(ended[b.episode_id].num_steps == 1 for b in branches)
    steps = [e for e in await _read(topics, "steps", 5) if isinstance(e, Step)]
    menus = {tuple(s.choices or ()) for s in steps}
    assert len(menus) == 1  # every branch restored the parent's (shuffled) menu
    picks = {s.action.text for s in steps if s.episode_id != "parent"}
    assert len(picks) >= 2, picks  # the siblings tried different actions from one state

    await AssemblerWorker(topics, AssemblerConfig(require_verdicts=False)).serve(idle_timeout=4)
    trajectories = [t for t in await _read(topics, "trajectories", 5) if isinstance(t, Trajectory)]
    siblings = [t for t in trajectories if t.group_id == group]
    assert len(siblings) == 4
    rewards = [t.reward for t in siblings]
    advantages = group_relative_advantages([t.group_id for t in siblings], rewards)
    assert (max(rewards) > min(rewards)) == any(abs(a) > 0 for a in advantages)


def _menu(spec: TaskSpec, seed: int) -> list[str]:
    return ChoiceEnv().reset(spec, seed).choices
