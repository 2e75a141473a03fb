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


async def test_records_wait_for_a_slow_restore(topics: Settings, producer: EventProducer) -> None:
    steps = [
        Step(
            episode_id=f"e{n}",
            step_index=0,
            env="t",
            task_id="t",
            policy_version=0,
            observation="o",
            action=Action(text="a"),
        )
        for n in range(30)
    ]
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
