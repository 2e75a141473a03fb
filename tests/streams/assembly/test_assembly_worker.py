"""``safactory worker assemble`` on the real broker: trajectories on sf.trajectories."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from data_episodes import episode_events
from topic_records import everything

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import EpisodeEnded, Outcome, Trajectory
from safactory.schemas import headers as h

pytestmark = pytest.mark.integration


def _assembler(
    settings: Settings, home: Path, episode_timeout: float = 6
) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": settings.topic_prefix,
        "SF_HOME": str(home),
    }
    cmd = [
        sys.executable,
        "-m",
        "safactory.cli.main",
        "worker",
        "assemble",
        "--verdict-timeout",
        "3",
        "--episode-timeout",
        str(episode_timeout),
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


async def _collect(
    settings: Settings, want: int, wait_s: float, proc: subprocess.Popen[bytes]
) -> list[Delivery]:
    got: list[Delivery] = []

    async def keep(d: Delivery) -> None:
        got.append(d)

    consumer = EventConsumer(["trajectories"], "t-collect", handler=keep, settings=settings)
    async with consumer:
        loop = asyncio.get_running_loop()
        end = loop.time() + wait_s
        while len(got) < want and loop.time() < end and proc.poll() is None:
            await consumer.poll_once(timeout_ms=500)
    return got


async def test_worker_emits_reward_complete_trajectories_keyed_by_group(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    complete = [e for n in range(6) for e in episode_events(n, steps=3)]
    no_verdict = episode_events(6, steps=2, episode_verdict=False)  # closes by verdict timeout
    unended = [e for e in episode_events(7, steps=2) if not isinstance(e, EpisodeEnded)][:3]
    await producer.publish_many(complete + no_verdict + unended)
    await producer.publish_many(complete[::5])  # redelivered duplicates
    bad = await producer.send_raw(
        topics.topic("steps"), key=b"ep-x", value=b"{not json", headers=[(h.SCHEMA, b"step/1")]
    )
    await bad
    proc = _assembler(topics, tmp_path)
    try:
        got = await _collect(topics, want=8, wait_s=120, proc=proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert len(got) == 8, out.decode()[-3000:]
    by_episode = {d.event.episode_id: d for d in got}
    assert len(by_episode) == 8, "a trajectory was emitted twice"
    for d in got:
        t = d.event
        assert isinstance(t, Trajectory)
        assert d.key == t.group_id.encode()
        assert h.header_value(d.headers, h.POLICY_VERSION) == str(t.policy_version)
        assert t.policy_version == min(s.policy_version for s in t.steps)
    assert {by_episode[f"ep-{n}"].event.completed_by for n in range(6)} == {"verdicts"}
    assert by_episode["ep-3"].event.reward < 0 < by_episode["ep-1"].event.reward
    assert by_episode["ep-6"].event.completed_by == "timeout"
    abandoned = by_episode["ep-7"].event
    assert abandoned.completed_by == "abandoned" and abandoned.outcome == Outcome.ABANDONED
    dead = await _raw_records(topics, topics.topic("dlq"))
    assert [r.value for r in dead] == [b"{not json"]
    assert h.header_value(dead[0].headers, h.ERROR).startswith("decode:")


async def _raw_records(settings: Settings, topic: str) -> list:
    return await everything(settings, topic)


async def test_an_episode_whose_fold_raises_is_dead_lettered(
    topics: Settings, producer: EventProducer
) -> None:
    """Poison pill: the record that completes an episode whose reward cannot be computed is
    dead-lettered after its retries; the worker goes on and assembles the next episodes."""
    from poison import POISON, Poisoned, assert_poison_pill_dead_lettered

    from safactory.streams.assembly import AssemblerConfig, RewardRule
    from safactory.streams.assembly.worker import AssemblerWorker

    class Raising(RewardRule):
        def components(self, ended, verdicts):  # type: ignore[no-untyped-def]
            if ended.task_id == POISON:
                raise Poisoned(POISON)
            return super().components(ended, verdicts)

    worker = AssemblerWorker(topics, AssemblerConfig(reward_rule=Raising()), tick_every_s=0.2)
    good = [e for n in (1, 2) for e in episode_events(n, steps=2)]
    bad = [
        e.model_copy(update={"task_id": POISON}) if isinstance(e, EpisodeEnded) else e
        for e in episode_events(3, steps=2)
    ]

    async def publish() -> None:
        await producer.publish_many([*good[: len(good) // 2], *bad, *good[len(good) // 2 :]])

    dead = await assert_poison_pill_dead_lettered(
        topics, worker.runtime, publish, lambda: worker.stats.emitted_by_verdicts >= 2
    )
    assert dead.key == b"ep-3"
    assert worker.stats.emitted_by_verdicts == 2
