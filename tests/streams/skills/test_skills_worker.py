"""The skills worker on the real broker: a SIGKILL between a trajectory's commit and its
verdicts' arrival loses nothing (the join is keyed state, not memory), a record whose
distillation raises is dead-lettered, and the consumer groups are stable across restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from data_episodes import episode_events
from topic_records import collect

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.reader import TopicReader
from safactory.schemas import Skill, Trajectory, Verdict, codec
from safactory.streams.assembly import TrajectoryAssembler
from safactory.streams.skills.library import distil_lessons

pytestmark = pytest.mark.integration

GROUP = "safactory-skills"


def _trajectories_and_verdicts(episodes: int) -> tuple[list[Trajectory], list[Verdict]]:
    events = [e for n in range(episodes) for e in episode_events(n, steps=3)]
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 1.0) if isinstance(t, Trajectory)]
    return trajectories, [e for e in events if isinstance(e, Verdict)]


def _start(settings: Settings, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": settings.topic_prefix,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "safactory.cli.main", "worker", "skills"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
        start_new_session=True,
    )


async def _committed_to_end(settings: Settings, group: str, topic: str) -> bool:
    """Whether ``group`` committed every partition of ``topic`` up to its end."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(settings.group(group))
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    parts = [TopicPartition(topic, p["partition"]) for p in described[0]["partitions"]]
    async with TopicReader(settings, "test-ends") as reader:
        ends = await reader.last_offsets(parts)
    done = {tp: meta.offset for tp, meta in committed.items()}
    return bool(parts) and all(done.get(tp, 0) >= ends[tp] for tp in parts)


async def test_a_kill_between_trajectory_and_verdicts_loses_nothing(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    trajectories, verdicts = _trajectories_and_verdicts(9)
    by_episode = {v.episode_id: [] for v in verdicts}
    for v in verdicts:
        by_episode[v.episode_id].append(v)
    expected = {t.episode_id for t in trajectories if distil_lessons(t, by_episode[t.episode_id])}
    assert len(expected) >= 3
    log = tmp_path / "skills.log"
    await producer.publish_many(trajectories)  # their verdicts are not on the topic yet
    routed = topics.topic(f"{GROUP}-by-episode")
    worker = _start(topics, log)
    try:
        async with asyncio.timeout(120):
            while not (  # the trajectories were read and committed by both processors
                await _committed_to_end(topics, f"{GROUP}-route", topics.topic("trajectories"))
                and await _committed_to_end(topics, GROUP, routed)
            ):
                assert worker.poll() is None, log.read_text()[-3000:]
                await asyncio.sleep(0.5)
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # the old worker held them in memory only
        worker.wait()
    await producer.publish_many(verdicts)
    worker = _start(topics, log)
    try:

        def sources(records: list) -> set[str]:
            skills = [codec.decode(r.value, r.headers) for r in records]
            return {e for s in skills if isinstance(s, Skill) for e in s.source_episode_ids}

        records = await collect(topics, topics.topic("skills"), lambda rs: expected <= sources(rs))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert expected <= sources(records), log.read_text()[-3000:]


async def test_a_trajectory_whose_distillation_raises_is_dead_lettered(
    topics: Settings, producer: EventProducer
) -> None:
    from poison import POISON, Poisoned, assert_poison_pill_dead_lettered

    from safactory.infra.embedding import MiniLM
    from safactory.schemas import ChatMessage
    from safactory.streams.skills.library import SkillLibrary
    from safactory.streams.skills.worker import SkillsWorker

    class Raising(SkillLibrary):
        def add(self, candidates):  # type: ignore[no-untyped-def]
            skills = list(candidates)
            if any(POISON in s.lesson for s in skills):
                raise Poisoned(POISON)
            return super().add(skills)

    trajectories, verdicts = _trajectories_and_verdicts(6)
    asked = [ChatMessage(role="user", content=POISON)]  # the request: in its lessons
    poisoned = trajectories[0].model_copy(update={"prompt": asked})
    assert poisoned.episode_id == "ep-0"  # unsafe: it has lessons
    worker = SkillsWorker(topics, Raising(MiniLM()))

    async def publish() -> None:
        await producer.publish_many([poisoned, *trajectories[1:], *verdicts])

    dead = await assert_poison_pill_dead_lettered(
        topics, worker.runtime, publish, lambda: worker.stats.trajectories >= len(trajectories) - 1
    )
    assert dead.key == poisoned.episode_id.encode()
