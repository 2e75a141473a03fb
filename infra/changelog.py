"""Keyed state kept in a compacted changelog topic, co-partitioned with a processor's inputs.

A processor writes each state change as one record (key → value; ``None`` deletes) to the
partition number of the input it came from, so whichever group member owns input partition
``p`` finds that partition's state in changelog partition ``p``. :func:`read_latest` reads
given partitions to their end offsets when the group assigns them: the latest value per key,
deleted keys left out. It stops at the end offsets taken when it started, so a partition that
is empty, or whose tail was compacted away (the position jumps past missing offsets), ends
the read as well as a full one does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from .aio import stop_client
from .config import Settings

log = logging.getLogger(__name__)

STALL_S = 10.0
"""A read that gets no record and no position change for this long gives up on a partition
(logged): a broker answering with nothing below its end offset would otherwise hang."""


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """The latest value of one key."""

    key: bytes
    value: bytes
    headers: Sequence[tuple[str, bytes]]


async def read_latest(
    settings: Settings, topic: str, partitions: Iterable[int]
) -> dict[int, dict[bytes, StoredRecord]]:
    """Partition → key → latest stored record, for each of ``partitions`` read to its end."""
    tps = [TopicPartition(topic, p) for p in sorted(set(partitions))]
    latest: dict[int, dict[bytes, StoredRecord]] = {tp.partition: {} for tp in tps}
    if not tps:
        return latest
    reader = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    await reader.start()
    try:
        reader.assign(tps)
        starts = await reader.beginning_offsets(tps)
        ends = await reader.end_offsets(tps)
        pending = {tp for tp in tps if ends[tp] > starts[tp]}
        for tp in pending:
            reader.seek(tp, starts[tp])
        loop = asyncio.get_running_loop()
        progress = loop.time()
        while pending:
            batch = await reader.getmany(*pending, timeout_ms=500)
            for tp, records in batch.items():
                store = latest[tp.partition]
                for record in records:
                    if record.key is None:
                        continue
                    if record.value is None:
                        store.pop(record.key, None)
                    else:
                        store[record.key] = StoredRecord(
                            record.key, record.value, tuple(record.headers)
                        )
            for tp in list(pending):
                if await reader.position(tp) >= ends[tp]:
                    pending.discard(tp)
            if batch:
                progress = loop.time()
            elif loop.time() - progress > STALL_S:
                stuck = {tp.partition: ends[tp] for tp in pending}
                log.warning(
                    "changelog %s: no progress below the end offsets %s; reading on "
                    "without the rest",
                    topic,
                    stuck,
                )
                break
    finally:
        await stop_client(reader, f"changelog {topic}")
    return latest
