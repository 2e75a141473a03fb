"""Reading what landed on a topic, raw, the way a test checks a worker's output.

Tests read through the project's own group-less reader (``infra.reader.TopicReader``): it
commits nothing, so reading never disturbs the workers under test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import ConsumerRecord

from safactory.infra.config import Settings
from safactory.infra.reader import TopicReader


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
