"""Every worker's consumer group is scoped by the topic prefix (issue #14, item 7): two
deployments on one cluster under different prefixes never join one group."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from safactory.agents.policies.scripted import CarefulPolicy
from safactory.agents.worker import SimulationWorker
from safactory.infra.config import Settings
from safactory.infra.topics import create_topics, delete_topics_where
from safactory.sinks.options import SinkOptions
from safactory.sinks.worker import run_sink
from safactory.streams.scoring.worker import run_scorer
from safactory.streams.skills.library import SkillLibrary
from safactory.streams.skills.worker import run_skills

pytestmark = pytest.mark.integration


class NoEmbedder:
    """Idle workers embed nothing; this only satisfies the constructors."""

    dim = 4

    def embed(self, texts: list[str]) -> object:
        raise AssertionError("an idle worker embedded text")


def test_group_names_are_scoped_by_prefix() -> None:
    assert Settings(topic_prefix="sf.").group("audit") == "audit"  # default names unchanged
    a, b = Settings(topic_prefix="team1."), Settings(topic_prefix="team2.")
    assert a.group("safactory-sink") == "safactory-sink-team1"
    assert a.group("safactory-sink") != b.group("safactory-sink")


async def _groups(settings: Settings) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap)
    await admin.start()
    try:
        return {g[0] for g in await admin.list_consumer_groups()}
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def _groups_seen(settings: Settings) -> AsyncIterator[set[str]]:
    """Every group the broker listed while the block ran. Listing only afterwards misses
    some: the coordinator's periodic clean-up deletes an empty group that committed nothing
    (an idle worker's), and in CI that ran between a worker's exit and the listing."""
    seen: set[str] = set()

    async def watch() -> None:
        while True:
            seen.update(await _groups(settings))
            await asyncio.sleep(0.1)

    watcher = asyncio.create_task(watch())
    try:
        yield seen
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    seen.update(await _groups(settings))


async def _run_every_worker(settings: Settings, db: Path) -> None:
    await create_topics(settings)
    await run_sink(settings, SinkOptions(db_path=db, idle_timeout_s=0.5))
    await run_scorer(settings, NoEmbedder(), idle_timeout_s=0.5)  # type: ignore[arg-type]
    await run_skills(settings, SkillLibrary(NoEmbedder()), idle_timeout_s=0.5)  # type: ignore[arg-type]
    sim = SimulationWorker(settings, CarefulPolicy(0))
    await sim.start()
    try:
        await sim.run(idle_timeout=0.5)
    finally:
        await sim.stop()


async def test_two_prefixes_never_share_a_worker_group(kafka: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    first = Settings(kafka_bootstrap=kafka, topic_prefix=f"a{tag}.")
    second = Settings(kafka_bootstrap=kafka, topic_prefix=f"b{tag}.")
    before = await _groups(first)
    try:
        async with _groups_seen(first) as seen_first:
            await _run_every_worker(first, tmp_path / "a")
        async with _groups_seen(second) as seen_second:
            await _run_every_worker(second, tmp_path / "b")
    finally:  # both prefixes' topics go, as the conftest's fixture does for one
        await delete_topics_where(
            first, lambda t: t.startswith((first.topic_prefix, second.topic_prefix))
        )
    joined_first = seen_first - before
    joined_second = seen_second - before - joined_first
    for name in ("safactory-sink", "safactory-scorer", "safactory-skills", "safactory-sim"):
        assert first.group(name) in joined_first, (name, joined_first)
        assert second.group(name) in joined_second, (name, joined_second)
    assert not joined_first & joined_second
