"""The consumer hands out a partition's records only after its assignment callback ran."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import TopicPartition

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, Step

pytestmark = pytest.mark.integration


def _steps(prefix: str, count: int) -> list[Step]:
    """One first step each of ``count`` episodes, spread over the partitions by key."""
    return [
        Step(
            episode_id=f"{prefix}{n}",
            step_index=0,
            env="t",
            task_id="t",
            policy_version=0,
            observation="o",
            action=Action(text="a"),
        )
        for n in range(count)
    ]


async def test_records_wait_for_a_slow_restore(topics: Settings, producer: EventProducer) -> None:
    steps = _steps("e", 30)
    await producer.publish_many(steps)
    restored: set[int] = set()
    handled_before_restore: list[int] = []
    handled: list[str] = []

    async def restore(assigned: set[TopicPartition]) -> None:
        await asyncio.sleep(2)  # a state read that takes a while
        restored.update(tp.partition for tp in assigned)

    async def handle(batch: list[Delivery]) -> None:
        for d in batch:
            if d.partition not in restored:
                handled_before_restore.append(d.partition)
            handled.append(d.event.event_id)

    consumer = EventConsumer(
        ["steps"], "t-slow-restore", batch_handler=handle, settings=topics, on_assigned=restore
    )
    async with consumer:
        for _ in range(40):
            await consumer.poll_once(timeout_ms=250)
            if len(handled) >= len(steps):
                break
    assert handled_before_restore == []
    assert sorted(handled) == sorted(s.event_id for s in steps)


async def test_a_batch_finishes_after_a_rebalance_took_its_partitions(
    topics: Settings, producer: EventProducer
) -> None:
    """A second member joins while the first holds a batch: finishing it must not fail on
    the partitions it lost, nor mark their offsets handled (their new owner reads them)."""
    steps = _steps("r", 60)
    await producer.publish_many(steps)

    async def ignore(batch: list[Delivery]) -> None:
        pass

    first = EventConsumer(["steps"], "t-revoked-batch", batch_handler=ignore, settings=topics)
    second = EventConsumer(["steps"], "t-revoked-batch", batch_handler=ignore, settings=topics)
    async with first:
        polled = None
        for _ in range(40):
            polled = await first.fetch(timeout_ms=250)
            if polled is not None and len(polled.offsets) > 1:
                break
        assert polled is not None and len(polled.offsets) > 1
        async with second:
            for _ in range(100):  # the rebalance runs in the background
                await second.fetch(timeout_ms=100)
                if second.assignment() and len(first.assignment()) < len(polled.offsets):
                    break
            lost = set(polled.offsets) - first.assignment()
            assert lost
            await first.finish(polled)
            assert not lost & set(first._uncommitted)
