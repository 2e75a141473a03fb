"""A bounded window of a topic, read without a consumer group.

Replay never joins a group: it assigns every partition, seeks to the window's start and
reads to its end, so no group's committed offsets (the live workers') are ever read or
moved. A window's ends are positions: an offset (the same on every partition), a point in
time (ISO 8601 or unix seconds: the first record at or after it), or open (the beginning
of the log, the end as it was when the read started).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from ...infra.config import Settings
from ...infra.topics import admin_client

UNIX_SECONDS_FROM = 1_000_000_000
"""Whole numbers at or above this read as unix seconds (2001-09-09), below as offsets."""
STALL_S = 10.0
"""A read that gets no record and no position change for this long ends (the broker answers
nothing below its end offset, e.g. a transaction marker)."""


class PositionError(ValueError):
    """A ``--from`` / ``--to`` value that is neither an offset nor a time."""


@dataclass(frozen=True, slots=True)
class Position:
    """One end of a window: an ``offset`` on every partition, or a time in ms."""

    offset: int | None = None
    time_ms: int | None = None

    def describe(self) -> str:
        """How the position reads in a report."""
        if self.offset is not None:
            return f"offset {self.offset}"
        assert self.time_ms is not None
        return datetime.fromtimestamp(self.time_ms / 1000, UTC).isoformat(timespec="seconds")


def parse_position(text: str, option: str = "--from") -> Position:
    """``1200`` (offset), ``1738324800`` or ``1738324800.5`` (unix seconds),
    ``2025-01-31T12:00`` / ``2025-01-31`` (ISO time, UTC unless it names a zone)."""
    raw = text.strip()
    if re.fullmatch(r"\d+", raw):
        number = int(raw)
        if number < UNIX_SECONDS_FROM:
            return Position(offset=number)
        return Position(time_ms=number * 1000)
    if re.fullmatch(r"\d+\.\d*", raw):
        seconds = float(raw)
        if seconds >= UNIX_SECONDS_FROM and math.isfinite(seconds):
            return Position(time_ms=int(seconds * 1000))
    try:
        when = datetime.fromisoformat(raw)
    except ValueError:
        when = None
    if when is None:
        raise PositionError(
            f"{option} {raw!r}: not an offset (e.g. 1200), unix seconds (e.g. 1738324800) or "
            "an ISO time (e.g. 2025-01-31T12:00)"
        )
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Position(time_ms=int(when.timestamp() * 1000))


@dataclass(frozen=True, slots=True)
class Span:
    """Offsets ``[start, end)`` of one partition."""

    start: int
    end: int

    @property
    def size(self) -> int:
        """Records in the span (at most: compaction may have removed some)."""
        return max(0, self.end - self.start)


async def partitions_of(settings: Settings, topic: str) -> list[TopicPartition]:
    """Every partition of ``topic``; a ``ValueError`` naming the topic if it does not exist."""
    admin = admin_client(settings)
    await admin.start()
    try:
        if topic not in set(await admin.list_topics()):
            raise ValueError(f"topic {topic} does not exist (check SF_TOPIC_PREFIX)")
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return [
        TopicPartition(topic, p["partition"])
        for p in sorted(described[0]["partitions"], key=lambda p: p["partition"])
    ]


async def resolve(
    reader: AIOKafkaConsumer,
    tps: list[TopicPartition],
    start: Position | None,
    end: Position | None,
) -> dict[TopicPartition, Span]:
    """Each partition's ``[start, end)`` for the window; the end is taken now, so records
    produced while the replay runs (its own verdicts among them) are never read."""
    first = await reader.beginning_offsets(tps)
    last = await reader.end_offsets(tps)

    async def at(position: Position | None, default: dict[TopicPartition, int]) -> dict:
        if position is None:
            return dict(default)
        if position.offset is not None:
            return {tp: min(max(position.offset, first[tp]), last[tp]) for tp in tps}
        found = await reader.offsets_for_times({tp: position.time_ms for tp in tps})
        return {tp: (last[tp] if found[tp] is None else found[tp].offset) for tp in tps}

    starts = await at(start, first)
    ends = await at(end, last)
    return {tp: Span(starts[tp], max(starts[tp], ends[tp])) for tp in tps}


def reader_for(settings: Settings, name: str) -> AIOKafkaConsumer:
    """A group-less consumer (it commits nothing, joins nothing)."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap,
        client_id=f"{settings.client_id}-{name}",
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )


async def read_window(
    settings: Settings,
    topic: str,
    start: Position | None = None,
    end: Position | None = None,
    *,
    on_spans: Callable[[dict[TopicPartition, Span]], None] | None = None,
    max_records: int = 2000,
) -> AsyncIterator[list[ConsumerRecord]]:
    """Yield the window's records in batches (each partition in offset order).
    ``on_spans`` hears the resolved spans before the first batch (for a progress total)."""
    reader = reader_for(settings, "replay")
    await reader.start()
    try:
        tps = await partitions_of(settings, topic)
        spans = await resolve(reader, tps, start, end)
        if on_spans is not None:
            on_spans(spans)
        pending = {tp for tp, span in spans.items() if span.size}
        reader.assign(list(spans))
        for tp in pending:
            reader.seek(tp, spans[tp].start)
        loop = asyncio.get_running_loop()
        progress = loop.time()
        while pending:
            batch = await reader.getmany(*pending, timeout_ms=500, max_records=max_records)
            out: list[ConsumerRecord] = []
            for tp, records in batch.items():
                stop = spans[tp].end
                out.extend(r for r in records if r.offset < stop)
            for tp in list(pending):
                if await reader.position(tp) >= spans[tp].end:
                    pending.discard(tp)
            if batch:
                progress = loop.time()
            elif loop.time() - progress > STALL_S:
                break
            if out:
                yield out
    finally:
        await reader.stop()


def header(record: ConsumerRecord, name: str) -> bytes | None:
    """One header's raw value, or None when absent."""
    for key, value in record.headers or ():
        if key == name:
            return value or b""
    return None


def screen(
    episodes: Iterable[str] | None, envs: Iterable[str] | None
) -> Callable[[ConsumerRecord], bool]:
    """A filter on ``sf-episode`` / ``sf-env`` headers (no payload decoding); None: any."""
    wanted_episodes = None if episodes is None else {e.encode() for e in episodes}
    wanted_envs = None if envs is None else {e.encode() for e in envs}

    def keep(record: ConsumerRecord) -> bool:
        if wanted_episodes is not None and header(record, "sf-episode") not in wanted_episodes:
            return False
        return wanted_envs is None or header(record, "sf-env") in wanted_envs

    return keep
