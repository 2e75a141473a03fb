"""The batch sink: batching, idempotency and resume live here; a store only writes batches.

A subclass says how to write rows to a table, which source offsets a table already holds,
and which event ids it already holds. The base turns a polled batch of deliveries into
rows, one table per topic, and writes each table's rows once:

1. records at or below the highest offset a table stores for their (topic, partition) are
   skipped without a lookup (a redelivery after a crash between write and commit);
2. duplicates within the batch are dropped (the first delivery of an event id wins);
3. ids the table already holds are dropped (the same event republished at a new offset):
   the base keeps a set of the 64-bit hashes of every stored id (loaded once, about 50
   bytes a row) and asks the store only about the rare ids whose hash it has seen.

``handle`` returns only after every write is durable; the consumer commits offsets after it
returns (``infra.EventConsumer(batch_handler=sink.handle)``), so delivery is
at-least-once and storage is exactly-once on the event id.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any

from ..infra import metrics
from ..infra.consumer import Delivery
from ..schemas import Event

Columns = dict[str, list[Any]]
ColumnMaker = Callable[[list[Delivery]], Columns]


class SinkStats(metrics.Tally):
    """Per-sink counters (in the metrics registry): what was written and why anything was
    not."""

    written = metrics.Count("sf_sink_rows_written", "rows written to LanceDB, per table", "table")
    batches = metrics.Count("sf_sink_batches", "polled batches written")
    skipped_below_offset = metrics.Count(
        "sf_sink_skipped_below_offset", "records a table already held by offset (redelivered)"
    )
    duplicates_in_batch = metrics.Count("sf_sink_duplicates_in_batch", "repeats in one batch")
    already_stored = metrics.Count("sf_sink_already_stored", "event ids a table already held")
    unrouted = metrics.Count("sf_sink_unrouted", "events of a type no table stores")

    @property
    def per_table(self) -> dict[str, int]:
        """Rows written per table."""
        return self.by("written")


class BatchSink(ABC):
    """Base of every sink. ``table_of`` maps an event type to its table, ``columns`` each
    table to the function that turns its deliveries into columns."""

    def __init__(
        self,
        table_of: dict[type[Event], str],
        columns: dict[str, ColumnMaker],
        *,
        check_ids: bool = True,
    ) -> None:
        self.table_of = table_of
        self.columns = columns
        self.check_ids = check_ids
        self.stats = SinkStats()
        self._watermarks: dict[str, dict[tuple[str, int], int]] = {}
        self._known: dict[str, set[int]] = {}

    # ------------------------------------------------------------------ store interface
    @abstractmethod
    def write(self, table: str, columns: Columns) -> None:
        """Append rows, given as columns, to ``table`` durably (one atomic commit), or raise."""

    @abstractmethod
    def stored_offsets(self, table: str) -> dict[tuple[str, int], int]:
        """The highest source offset ``table`` holds per (topic, partition)."""

    @abstractmethod
    def existing_ids(self, table: str, ids: list[str]) -> set[str]:
        """Which of ``ids`` ``table`` already holds."""

    @abstractmethod
    def stored_ids(self, table: str) -> Iterable[str]:
        """Every event id ``table`` holds (read once, at the first batch for it)."""

    # ------------------------------------------------------------------ batching logic
    def tables(self) -> list[str]:
        """Every table this sink writes."""
        return sorted(self.columns)

    def watermark(self, table: str) -> dict[tuple[str, int], int]:
        """Highest stored offset per (topic, partition), read once from the store."""
        if table not in self._watermarks:
            self._watermarks[table] = dict(self.stored_offsets(table))
        return self._watermarks[table]

    def forget(self) -> None:
        """Drop the watermarks and id hashes read so far: another writer of the same
        database may have written since (the group gave this sink partitions it wrote), so
        they are read again, from the store's latest version, at the next batch."""
        self._watermarks.clear()
        self._known.clear()

    def known_hashes(self, table: str) -> set[int]:
        """Hashes of the ids ``table`` holds, read once from the store."""
        if table not in self._known:
            self._known[table] = {hash(i) for i in self.stored_ids(table)}
        return self._known[table]

    async def handle(self, deliveries: list[Delivery]) -> None:
        """Write one polled batch durably (use as the consumer's ``batch_handler``); the
        blocking writes run in a thread so the consumer keeps its group membership."""
        await asyncio.to_thread(self.write_batch, deliveries)

    def write_batch(self, deliveries: Iterable[Delivery]) -> int:
        """Route, filter and write a batch; returns the number of rows written."""
        grouped: dict[str, list[Delivery]] = {}
        for delivery in deliveries:
            table = self.table_of.get(type(delivery.event))
            if table is None:
                self.stats.unrouted += 1
                continue
            grouped.setdefault(table, []).append(delivery)
        written = 0
        for table, items in grouped.items():
            written += self._write_table(table, items)
        self.stats.batches += 1
        return written

    def _write_table(self, table: str, items: list[Delivery]) -> int:
        marks = self.watermark(table)
        fresh: dict[str, Delivery] = {}
        for d in items:
            if d.offset <= marks.get((d.topic, d.partition), -1):
                self.stats.skipped_below_offset += 1
            elif d.event.event_id in fresh:
                self.stats.duplicates_in_batch += 1
            else:
                fresh[d.event.event_id] = d
        if fresh and self.check_ids:
            known = self.known_hashes(table)
            maybe = [i for i in fresh if hash(i) in known]
            for event_id in self.existing_ids(table, maybe) if maybe else ():
                del fresh[event_id]
                self.stats.already_stored += 1
        if fresh:
            self.write(table, self.columns[table](list(fresh.values())))
            if self.check_ids:
                self._known[table].update(hash(i) for i in fresh)
        for d in items:  # the batch is durable: move the watermark past all of it
            key = (d.topic, d.partition)
            marks[key] = max(marks.get(key, -1), d.offset)
        self.stats.count("written", len(fresh), table=table)
        return len(fresh)
