"""The one group-less topic reader: replay windows, state restores, watchers and monitors.

A reader never joins a consumer group, so it commits nothing and never moves a worker's
offsets. It assigns the partitions it is given, pins each one's start position (a record
published after :meth:`TopicReader.open` returned is read), and reads either up to end
offsets fixed when it opened (a *bounded* read: a restore, a replay window, "what is on the
topic now") or on and on (*following*: a watcher, a monitor). Memory is bounded by
``max_records`` per fetch.

A bounded read that gets no record and sees no position move for ``stall_s`` raises
:class:`ReadStalled` naming the partitions and offsets it could not reach (a broker that
died, or one answering nothing below its end offset); the caller decides whether that is
fatal (a state restore: it is) or the end of what can be read (a replay window).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Self

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from ..schemas import DecodeError, Event, codec
from .aio import stop_client
from .config import Settings
from .consumer import FETCH_MAX_WAIT_MS, PARTITION_FETCH_BYTES
from .topics import admin_client

log = logging.getLogger(__name__)

STALL_S = 10.0
"""A bounded read that makes no progress for this long raises :class:`ReadStalled`."""
Start = Literal["beginning", "end"] | Mapping[TopicPartition, int]
Until = Literal["end"] | Mapping[TopicPartition, int] | None


class ReadStalled(RuntimeError):
    """A bounded read made no progress for ``stall_s`` below its end offsets."""

    def __init__(self, name: str, behind: dict[TopicPartition, tuple[int, int]], stall_s: float):
        self.behind = behind
        shown = ", ".join(
            f"{tp.topic}-{tp.partition} at {at} of {end}" for tp, (at, end) in behind.items()
        )
        super().__init__(f"{name}: no progress for {stall_s:g}s below the end offsets ({shown})")


class TopicMissing(ValueError):
    """A topic the reader was asked to read does not exist (after waiting for it): a
    configuration error (a wrong prefix, topics not created), said in one line."""


@dataclass(frozen=True, slots=True)
class Span:
    """Offsets ``[start, end)`` of one partition (``end`` None: following)."""

    start: int
    end: int | None

    @property
    def size(self) -> int | None:
        """Records in the span (at most: compaction may have removed some)."""
        return None if self.end is None else max(0, self.end - self.start)


class TopicReader:
    """Reads partitions without a consumer group (see the module docstring).

    ``async with TopicReader(settings, "restore") as reader: await reader.open(...)``, then
    :meth:`read` batches, or ``async for batch in reader`` until a bounded read is done.
    ``committed_only`` skips records of aborted transactions (``read_committed``)."""

    def __init__(
        self,
        settings: Settings,
        name: str,
        *,
        max_records: int = 5000,
        stall_s: float = STALL_S,
        committed_only: bool = True,
        fetch_wait_ms: int = FETCH_MAX_WAIT_MS,
    ) -> None:
        self.settings = settings
        self.name = name
        self.max_records = max_records
        self.stall_s = stall_s
        self.spans: dict[TopicPartition, Span] = {}
        self._pending: set[TopicPartition] = set()
        """Partitions of a bounded read not yet read to their end."""
        self._progress = 0.0
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap,
            client_id=f"{settings.client_id}-{name}",
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed" if committed_only else "read_uncommitted",
            max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
            fetch_max_wait_ms=fetch_wait_ms,
        )

    async def start(self) -> None:
        """Connect."""
        await self._consumer.start()

    async def stop(self) -> None:
        """Disconnect (a stray cancellation aiokafka raises while closing is swallowed)."""
        await stop_client(self._consumer, self.name)

    async def __aenter__(self) -> TopicReader:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ where to read

    async def partitions(
        self, topics: Iterable[str], *, wait_s: float = 0.0
    ) -> list[TopicPartition]:
        """Every partition of ``topics`` (full names), waiting up to ``wait_s`` for topics
        just created to appear; :class:`TopicMissing` names those that never did."""
        names = list(dict.fromkeys(topics))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        admin = admin_client(self.settings)
        await admin.start()
        try:
            while True:
                existing = set(await admin.list_topics())
                found: dict[str, list[int]] = {}
                wanted = [t for t in names if t in existing]
                for described in await admin.describe_topics(wanted) if wanted else []:
                    parts = [p["partition"] for p in described["partitions"]]
                    if not described["error_code"] and parts:
                        found[described["topic"]] = sorted(parts)
                missing = [t for t in names if t not in found]
                if not missing:
                    return [TopicPartition(t, p) for t in names for p in found[t]]
                if loop.time() >= deadline:
                    raise TopicMissing(
                        f"{self.name}: topic(s) {', '.join(missing)} do not exist (create "
                        "them with `safactory topics create`, or check SF_TOPIC_PREFIX)"
                    )
                await asyncio.sleep(0.2)
        finally:
            await admin.close()

    async def first_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The oldest offset each partition still holds."""
        return await self._consumer.beginning_offsets(tps)

    async def last_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset (next to be written) of each partition, now."""
        return await self._consumer.end_offsets(tps)

    async def offsets_at(
        self, tps: list[TopicPartition], time_ms: int
    ) -> dict[TopicPartition, int]:
        """Per partition, the first offset at or after ``time_ms`` (its end if none)."""
        found = await self._consumer.offsets_for_times({tp: time_ms for tp in tps})
        ends = await self.last_offsets(tps)
        return {tp: ends[tp] if found[tp] is None else found[tp].offset for tp in tps}

    async def open(
        self,
        tps: Iterable[TopicPartition],
        *,
        start: Start = "beginning",
        until: Until = None,
    ) -> dict[TopicPartition, Span]:
        """Assign ``tps`` and pin where each is read from (``start``: the log's beginning,
        its end now, or given offsets) and up to where (``until``: the end offsets now,
        given offsets, or None to follow). Returns the spans; once it returns, a record
        published later is read (following) or not (bounded by an end taken before it)."""
        parts = list(dict.fromkeys(tps))
        firsts = await self.first_offsets(parts) if parts else {}
        lasts = await self.last_offsets(parts) if parts else {}
        if start == "beginning":
            starts = dict(firsts)
        elif start == "end":
            starts = dict(lasts)
        else:
            starts = {
                tp: min(max(start.get(tp, firsts[tp]), firsts[tp]), lasts[tp]) for tp in parts
            }
        if until is None:
            ends: dict[TopicPartition, int | None] = dict.fromkeys(parts)
        elif until == "end":
            ends = dict(lasts)
        else:
            ends = {tp: max(starts[tp], until.get(tp, lasts[tp])) for tp in parts}
        self.spans = {tp: Span(starts[tp], ends[tp]) for tp in parts}
        self._consumer.assign(parts)
        for tp in parts:
            self._consumer.seek(tp, starts[tp])
        for tp in parts:  # resolve the positions now: nothing published after this is missed
            await self._consumer.position(tp)
        self._pending = {tp for tp, span in self.spans.items() if span.end is not None}
        self._pending = {tp for tp in self._pending if (self.spans[tp].size or 0) > 0}
        self._progress = asyncio.get_running_loop().time()
        return self.spans

    # ------------------------------------------------------------------ reading

    @property
    def done(self) -> bool:
        """A bounded read has reached every partition's end (never, while following)."""
        return not self._pending and all(s.end is not None for s in self.spans.values())

    async def read(self, timeout_ms: int = 500) -> list[ConsumerRecord]:
        """The next records (none past a bounded read's ends); [] when done or quiet.
        Raises :class:`ReadStalled` when a bounded read stops progressing."""
        if not self.spans or self.done:
            return []
        following = [tp for tp, s in self.spans.items() if s.end is None]
        wanted = [*self._pending, *following]
        batch = await self._consumer.getmany(
            *wanted, timeout_ms=timeout_ms, max_records=self.max_records
        )
        out: list[ConsumerRecord] = []
        for tp, records in batch.items():
            end = self.spans[tp].end
            if end is None:
                out.extend(records)
            elif records and records[-1].offset < end:
                out.extend(records)
            else:
                out.extend(r for r in records if r.offset < end)
        if self._pending:
            await self._check_pending(bool(batch))
        return out

    async def _check_pending(self, got: bool) -> None:
        loop = asyncio.get_running_loop()
        moved = False
        for tp in list(self._pending):
            end = self.spans[tp].end
            assert end is not None
            position = await self._consumer.position(tp)
            if position >= end:
                self._pending.discard(tp)
                moved = True
        if got or moved:
            self._progress = loop.time()
        elif self._pending and loop.time() - self._progress > self.stall_s:
            behind = {}
            for tp in sorted(self._pending):
                end = self.spans[tp].end
                assert end is not None
                behind[tp] = (await self._consumer.position(tp), end)
            raise ReadStalled(self.name, behind, self.stall_s)

    def __aiter__(self) -> TopicReader:
        return self

    async def __anext__(self) -> list[ConsumerRecord]:
        """Batches of a bounded read until it is done (a following read never ends)."""
        while not self.done:
            records = await self.read()
            if records:
                return records
        raise StopAsyncIteration

    async def caught_up(self, timeout_s: float) -> bool:
        """Whether everything on the partitions when this was called has been read (by
        whoever calls :meth:`read` meanwhile), within ``timeout_s``."""
        tps = list(self.spans)
        if not tps:
            return True
        ends = await self.last_offsets(tps)
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    if all([await self._consumer.position(tp) >= end for tp, end in ends.items()]):
                        return True
                    await asyncio.sleep(0.05)
        except TimeoutError:
            return False


class TopicFollower:
    """A :class:`TopicReader` followed by a background task until :meth:`stop` (the policy
    watcher, the skills and control followers): a subclass opens ``self._reader`` in its
    ``start`` and hands its loop to :meth:`_follow_in_background`."""

    _reader: TopicReader
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the reader and start following."""
        raise NotImplementedError

    async def _open(self, topic: str, **where: object) -> dict[TopicPartition, Span]:
        """Connect and open every partition of ``topic`` (``where``: :meth:`TopicReader.open`'s
        ``start`` / ``until``); disconnected again if that fails."""
        await self._reader.start()
        try:
            tps = await self._reader.partitions([topic], wait_s=30)
            return await self._reader.open(tps, **where)  # type: ignore[arg-type]
        except BaseException:
            await self._reader.stop()
            raise

    def _follow_in_background(self, loop: Coroutine[object, object, None], name: str) -> None:
        self._task = asyncio.create_task(loop, name=name)

    async def stop(self) -> None:
        """Stop following and disconnect."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._reader.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def header(record: ConsumerRecord, name: str) -> bytes | None:
    """One header's raw value, or None when absent."""
    for key, value in record.headers or ():
        if key == name:
            return value or b""
    return None


class Decoder:
    """Decodes what a reader read, the same way everywhere: ``for record, event in
    decoder(records)``. A tombstone (no value) is passed over; so is a record that does not
    decode, named in a warning and counted in ``undecodable``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.undecodable = 0

    def __call__(self, records: Iterable[ConsumerRecord]) -> Iterator[tuple[ConsumerRecord, Event]]:
        for record in records:
            event = self.decode(record)
            if event is not None:
                yield record, event

    def decode(self, record: ConsumerRecord) -> Event | None:
        """``record``'s event; None for a tombstone or an undecodable record."""
        if record.value is None:
            return None
        try:
            return codec.decode(record.value, record.headers)
        except DecodeError as exc:
            self.undecodable += 1
            log.warning(
                "%s: undecodable record %s-%d at offset %d: %s",
                self.name,
                record.topic,
                record.partition,
                record.offset,
                exc,
            )
            return None
