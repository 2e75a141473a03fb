"""Backfill: rebuild LanceDB tables from the log alone.

Each table's topic is read from its beginning to its end as the backfill started, with the
group-less ``TopicReader`` (the live sink's offsets never move), and written through the sink's own
batching: rows a table already holds (by source offset, then by event id) are skipped, so a
dropped table is rebuilt whole and a damaged one gets only what it misses. Row for row the
result is what the live sink wrote (the same event ids, payloads and source offsets); only
``ingested_at`` says when.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from ..infra.config import Settings
from ..infra.consumer import Delivery
from ..infra.embedding import TextEmbedder as Embedder
from ..infra.reader import Decoder, TopicReader
from .lance import LanceSink
from .location import Db
from .tables import TABLE_OF, TOPICS

TABLE_TOPIC = {name: name for name in TOPICS}
"""Each table is fed by the catalogue topic of the same name."""
BATCH = 5000
"""Records written in one LanceDB commit per table."""


@dataclass
class BackfillReport:
    """What one backfill read and wrote, per table."""

    read: dict[str, int] = field(default_factory=dict)
    written: dict[str, int] = field(default_factory=dict)
    undecodable: int = 0
    indexes: list[str] = field(default_factory=list)


async def backfill(
    settings: Settings,
    db: Db,
    tables: list[str],
    *,
    embedder: Embedder | None = None,
    on_total: Callable[[int], None] = lambda n: None,
    on_advance: Callable[[int], None] = lambda n: None,
) -> BackfillReport:
    """Write every record of each table's topic that the table does not hold yet."""
    unknown = sorted(set(tables) - set(TABLE_TOPIC))
    if unknown:
        raise ValueError(
            f"unknown table(s) {', '.join(unknown)}; choose from {', '.join(TABLE_TOPIC)}"
        )
    sink = LanceSink(db, embedder=embedder)
    report = BackfillReport()
    decoder = Decoder("backfill")
    for table in tables:
        topic = settings.topic(TABLE_TOPIC[table])
        before = sink.stats.per_table.get(table, 0)
        pending: list[Delivery] = []
        async with TopicReader(settings, "backfill", max_records=BATCH) as reader:
            spans = await reader.open(await reader.partitions([topic]), until="end")
            on_total(sum(s.size or 0 for s in spans.values()))
            async for batch in reader:
                pending.extend(
                    Delivery.of(record, event)
                    for record, event in decoder(batch)
                    if TABLE_OF.get(type(event)) == table
                )
                report.read[table] = report.read.get(table, 0) + len(batch)
                if len(pending) >= BATCH:
                    await asyncio.to_thread(sink.write_batch, pending)
                    pending = []
                on_advance(len(batch))
        if pending:
            await asyncio.to_thread(sink.write_batch, pending)
        report.written[table] = sink.stats.per_table.get(table, 0) - before
    report.undecodable = decoder.undecodable
    report.indexes = await asyncio.to_thread(sink.ensure_indexes)
    return report
