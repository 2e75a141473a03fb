"""A bounded window of a topic, read without a consumer group.

Replay never joins a group: the group-less ``TopicReader`` assigns every partition, seeks
to the window's start and reads to its end, so no group's committed offsets (the live
workers') are ever read or moved. A window's ends are positions: an offset (the same on
every partition), a point in time (ISO 8601 or unix seconds: the first record at or after
it), or open (the beginning of the log, the end as it was when the read started).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from aiokafka import ConsumerRecord, TopicPartition

from ...infra.config import Settings
from ...infra.reader import ReadStalled, Span, TopicReader, header

log = logging.getLogger(__name__)

UNIX_SECONDS_FROM = 1_000_000_000
"""Whole numbers at or above this read as unix seconds (2001-09-09), below as offsets."""


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


async def resolve(
    reader: TopicReader,
    tps: list[TopicPartition],
    start: Position | None,
    end: Position | None,
) -> dict[TopicPartition, Span]:
    """Each partition's ``[start, end)`` for the window; the end is taken now, so records
    produced while the replay runs (its own verdicts among them) are never read."""
    first = await reader.first_offsets(tps)
    last = await reader.last_offsets(tps)

    async def at(position: Position | None, default: dict[TopicPartition, int]) -> dict:
        if position is None:
            return dict(default)
        if position.offset is not None:
            return {tp: min(max(position.offset, first[tp]), last[tp]) for tp in tps}
        assert position.time_ms is not None
        return await reader.offsets_at(tps, position.time_ms)

    starts = await at(start, first)
    ends = await at(end, last)
    return {tp: Span(starts[tp], max(starts[tp], ends[tp])) for tp in tps}


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
    ``on_spans`` hears the resolved spans before the first batch (for a progress total).
    A window the broker stops answering below its end (a transaction marker) ends there."""
    async with TopicReader(settings, "replay", max_records=max_records) as reader:
        tps = await reader.partitions([topic])
        spans = await resolve(reader, tps, start, end)
        if on_spans is not None:
            on_spans(spans)
        await reader.open(
            tps,
            start={tp: s.start for tp, s in spans.items()},
            until={tp: s.end or s.start for tp, s in spans.items()},
        )
        try:
            async for batch in reader:
                yield batch
        except ReadStalled as exc:
            log.warning("replay window of %s ends short: %s", topic, exc)


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
