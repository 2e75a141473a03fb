"""Reading what landed on a topic, raw, the way a test checks a worker's output.

Tests read through the project's own group-less reader (``infra.reader.TopicReader``): it
commits nothing, so reading never disturbs the workers under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import ConsumerRecord, TopicPartition

from safactory.infra.config import Settings
from safactory.infra.consumer import GroupConsumer
from safactory.infra.reader import TopicReader
from safactory.infra.topics import admin_client


async def collect(
    settings: Settings,
    topic: str,
    done: Callable[[list[ConsumerRecord]], bool] = lambda records: False,
    wait_s: float = 240.0,
) -> list[ConsumerRecord]:
    """Read ``topic`` (a full name) from its beginning until ``done(records)`` holds or
    ``wait_s`` passed; the records read."""
    records: list[ConsumerRecord] = []
    async with TopicReader(settings, "test-collect", committed_only=False) as reader:
        await reader.open(await reader.partitions([topic], wait_s=min(wait_s, 30.0)))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not done(records) and loop.time() < deadline:
            records.extend(await reader.read(timeout_ms=200))
    return records


async def everything(settings: Settings, topic: str) -> list[ConsumerRecord]:
    """Every record on ``topic`` (a full name) now."""
    records: list[ConsumerRecord] = []
    async with TopicReader(settings, "test-everything", committed_only=False) as reader:
        await reader.open(await reader.partitions([topic], wait_s=30.0), until="end")
        async for batch in reader:
            records.extend(batch)
    return records


async def committed(settings: Settings, group: str) -> dict[TopicPartition, int]:
    """The offsets ``group`` (a full group name) committed, by partition."""
    admin = admin_client(settings)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return {tp: meta.offset for tp, meta in offsets.items() if meta.offset >= 0}


async def set_committed(settings: Settings, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Make ``group`` (a full name) look as if it had committed ``offsets`` (a lagging
    deployment, for the monitor's tests)."""
    consumer = GroupConsumer([], group, settings=settings)
    client = consumer._consumer  # the group's own client: only it may commit for the group
    await client.start()
    try:
        client.assign(list(offsets))
        await client.commit(offsets)
    finally:
        await client.stop()
