"""A consumer that goes quiet commits its last batch on the interval: an idle group has lag 0
(the chaos campaign saw an idle auditor 360 records behind until its next record)."""

from __future__ import annotations

import asyncio

import pytest

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.infra.topics import admin_client
from safactory.schemas import Action, Step

pytestmark = pytest.mark.integration


async def test_idle_consumer_commits_its_last_batch(
    topics: Settings, producer: EventProducer
) -> None:
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
        for n in range(12)
    ]
    await producer.publish_many(steps[:6])
    handled: list[Delivery] = []

    async def keep(batch: list[Delivery]) -> None:
        handled.extend(batch)

    group = topics.group("t-idle-commit")
    consumer = EventConsumer(
        ["steps"], group, batch_handler=keep, settings=topics, commit_interval_ms=300
    )
    async with consumer:
        while len(handled) < 6:  # the first batch commits at once (no commit yet)
            await consumer.poll_once(timeout_ms=200)
        await producer.publish_many(steps[6:])
        while len(handled) < len(steps):  # within the interval: not committed yet
            await consumer.poll_once(timeout_ms=200)
        await asyncio.sleep(0.4)
        for _ in range(3):  # quiet polls, no records
            await consumer.poll_once(timeout_ms=100)
        admin = admin_client(topics)
        await admin.start()
        try:
            committed = await admin.list_consumer_group_offsets(group)
        finally:
            await admin.close()
        total = sum(m.offset for tp, m in committed.items() if tp.topic == topics.topic("steps"))
        assert total == len(steps)  # committed while still running, not only at stop
