"""``safactory worker sink``: the factory's topics in, LanceDB tables out.

Every LanceDB write is a commit, and every commit a new table version with its own manifest,
so the processor gathers records (up to ``max_records`` or ``gather_s`` seconds) and writes
each batch in one commit per table (``sinks/base.py``: resume past stored offsets, drop ids
already held); the runtime commits the offsets only after that write. Maintenance passes
run every ``maintain_every_s`` seconds that saw writes (:mod:`.maintenance`). A disk that
refuses writes (``OSError``) stops the worker instead of dead-lettering what it reads.
"""

from __future__ import annotations

import asyncio
import logging

from ..infra.config import Settings
from ..infra.consumer import Delivery
from ..infra.embedding import TextEmbedder as Embedder
from ..infra.processor import Context, Processor, Runtime, Timer
from .lance import LanceSink
from .maintenance import MaintenancePasses
from .options import SinkOptions

log = logging.getLogger(__name__)


class SinkWorker:
    """The sink processor: batches into LanceDB, maintenance on a timer."""

    def __init__(
        self, settings: Settings, options: SinkOptions, embedder: Embedder | None = None
    ) -> None:
        self.options = options
        self.sink = LanceSink(options.db_path, embedder=embedder)
        self.passes = MaintenancePasses(self.sink, options.keep_versions)
        self.processor = Processor(
            "sink",
            inputs=options.topics,
            handle_batch=self.write,
            timers=(Timer(options.maintain_every_s, self.passes.due),),
            group=options.group_id,
            on_assigned=self.assigned,
            max_records=options.max_records,
            gather_s=options.gather_s,
            fatal=(OSError,),
        )
        self.runtime = Runtime(settings, self.processor)

    async def write(self, records: list[Delivery], ctx: Context) -> None:
        """Write one gathered batch durably (one commit per table)."""
        async with self.passes.writing:
            await self.sink.handle(records)
        log.info("batch of %d: %s", len(records), self.sink.stats)

    async def assigned(self, partitions: set[int], ctx: Context) -> None:
        """New partitions: another sink of the group may have written their records up to
        where it stopped (a crash between its write and its commit), so what the tables
        hold is read again from their latest version before the next batch."""
        async with self.passes.writing:
            await asyncio.to_thread(self.sink.reread)

    async def serve(self) -> LanceSink:
        """Run until SIGINT / SIGTERM (or idle); an idle exit leaves indexed tables."""
        for name in self.sink.tables():
            self.sink.watermark(name)  # resume point, read once
        try:
            await self.runtime.serve(idle_timeout=self.options.idle_timeout_s)
        finally:
            if self.runtime.stopping:
                self.passes.abandon()  # stop promptly
        await self.passes.finish(final=not self.runtime.stopping)
        return self.sink


async def run_sink(
    settings: Settings, options: SinkOptions, embedder: Embedder | None = None
) -> LanceSink:
    """Sink the topics into ``options.db_path`` until stopped (or idle)."""
    return await SinkWorker(settings, options, embedder).serve()
