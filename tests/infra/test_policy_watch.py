"""The one policy watcher: a view of the compacted policy topic (latest per name, live),
shared by the simulation workers and the trainer's followers."""

from __future__ import annotations

import asyncio

import pytest

from safactory.agents.policies import CarefulPolicy
from safactory.agents.worker import SimulationWorker
from safactory.infra.config import Settings
from safactory.infra.policy_watch import PolicyWatcher
from safactory.infra.producer import EventProducer
from safactory.schemas import PolicyVersion

pytestmark = pytest.mark.integration


def _announce(name: str, version: int) -> PolicyVersion:
    return PolicyVersion(
        policy_name=name, policy_version=version, uri=f"mem://{name}/{version}", sha256="a" * 64
    )


async def test_view_has_the_latest_per_name_at_start_then_follows_live(
    producer: EventProducer, topics: Settings
) -> None:
    await producer.publish_many([_announce("a", 1), _announce("a", 3), _announce("b", 7)])
    topic = topics.topic("policy")
    await (await producer.send_raw(topic, key=b"a", value=b"not json", headers=[]))
    async with PolicyWatcher(topics) as watcher:
        assert {n: v.policy_version for n, v in watcher.latest.items()} == {"a": 3, "b": 7}
        assert watcher.undecodable == 1
        # One partition, so a record read means every record before it was read too.
        await producer.publish(_announce("a", 2))  # late and older: versions only go forward
        await (await producer.send_raw(topic, key=b"b", value=None, headers=[]))  # tombstone
        async with asyncio.timeout(20):
            while "b" in watcher.latest:  # noqa: ASYNC110 (no event tells a name is gone)
                await asyncio.sleep(0.05)
            assert watcher.latest["a"].policy_version == 3
            await producer.publish(_announce("a", 4))
            assert (await watcher.wait_for("a", 4)).uri == "mem://a/4"


async def test_a_restarted_worker_still_knows_the_announcements(
    producer: EventProducer, topics: Settings
) -> None:
    """A view commits nothing: a worker that restarts with the same id rebuilds it from the
    log (a committed group offset would hide every announcement made before the restart)."""
    await producer.publish(_announce("careful", 5))
    for _ in range(2):
        worker = SimulationWorker(topics, CarefulPolicy(), worker_id="w-restart")
        assert isinstance(worker.watcher, PolicyWatcher)
        await worker.start()
        try:
            assert worker.watcher.latest["careful"].policy_version == 5
        finally:
            await worker.stop()
