"""A simulation worker under the capacity rule, against the real broker: it starts no
episode the trainer's announced ``consumed`` count leaves no room for."""

from __future__ import annotations

import asyncio

import pytest

from safactory.agents.policies import CarefulPolicy, PolicyInput, PolicyOutput
from safactory.agents.runner import EpisodeResult
from safactory.agents.tasks import suite_tasks
from safactory.agents.worker import SimulationWorker
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.staleness import StalenessController
from safactory.schemas import PolicyVersion

pytestmark = pytest.mark.integration


class _Slow(CarefulPolicy):
    """The careful plan, slower per step, counting the episodes stepping at once."""

    def __init__(self) -> None:
        super().__init__(version=0)
        self.stepping = 0  # an episode is in one step at a time: episodes stepping now
        self.peak = 0

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        self.stepping += 1
        self.peak = max(self.peak, self.stepping)
        await asyncio.sleep(0.1)
        self.stepping -= 1
        return await super().act(inp)


async def test_a_worker_without_capacity_does_not_start_an_episode(
    producer: EventProducer, topics: Settings
) -> None:
    # The trainer at v0 has consumed nothing; batch 2, max_staleness 0: room for 2 episodes
    # (then one at a time whenever none is in flight, as no update comes).
    await producer.publish(
        PolicyVersion(
            policy_name="careful", policy_version=0, uri="mem://v0", sha256="a" * 64, consumed=0
        )
    )
    staleness = StalenessController(max_staleness=0, batch_size=2)
    policy = _Slow()
    tasks = suite_tasks("embodied", 12, group_id="capacity")
    ended: list[EpisodeResult] = []
    done = asyncio.Event()

    def finished(result: EpisodeResult) -> None:
        ended.append(result)
        if len(ended) == len(tasks):
            done.set()

    worker = SimulationWorker(
        topics, policy, concurrency=4, group_id="capacity", staleness=staleness, on_done=finished
    )
    await worker.start()
    await worker.watcher.wait_for("careful", 0)
    await producer.publish_many(tasks)
    run = asyncio.create_task(worker.run())
    async with asyncio.timeout(90):
        await done.wait()
    worker.request_stop()
    await run
    await worker.stop()
    assert policy.peak == 2  # never more than the capacity of 2 at once, of 4 slots
    assert staleness.started == len(tasks)  # and yet every task ran (liveness)
    assert all(r.num_steps for r in ended)
