"""``safactory worker sink``: the factory's topics in, LanceDB tables out.

Every LanceDB write is a commit, and every commit a new table version with its own manifest,
so the processor gathers records (up to ``max_records`` or ``gather_s`` seconds) and writes
each batch in one commit per table (``sinks/base.py``: resume past stored offsets, drop ids
already held); the runtime commits the offsets only after that write. Compaction, indexes
and cleanup of untagged versions older than ``keep_versions`` run in a child process every
``maintain_every_s`` seconds that saw writes, never at the same time as a write. A disk that
refuses writes (``OSError``) stops the worker instead of dead-lettering what it reads.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import dataclass
from datetime import timedelta

from ..infra.config import Settings
from ..infra.consumer import Delivery
from ..infra.embedding import TextEmbedder as Embedder
from ..infra.processor import Context, Processor, Runtime, Tick, Timer
from .lance import LanceSink
from .location import Db
from .tables import TOPICS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SinkOptions:
    """How the sink worker runs."""

    db_path: Db
    """A folder, an object-store URI, or a :class:`~.location.LanceLocation` with options."""
    group_id: str = "safactory-sink"
    """Scoped by the topic prefix (``Settings.group``): one sink group per database."""
    topics: tuple[str, ...] = TOPICS
    max_records: int = 5000
    """Most records written in one commit."""
    gather_s: float = 2.0
    """Longest a record waits for others to share its commit."""
    maintain_every_s: float = 60.0
    keep_versions: timedelta = timedelta(minutes=10)
    """Untagged table versions older than this are deleted by maintenance (readers of an older
    version tag it first, as ``export --tag`` does)."""
    idle_timeout_s: float | None = None
    """Return after this long without records (tests, one-shot backfills); None: run on."""


class SinkWorker:
    """The sink processor: batches into LanceDB, maintenance on a timer."""

    def __init__(
        self, settings: Settings, options: SinkOptions, embedder: Embedder | None = None
    ) -> None:
        self.options = options
        self.sink = LanceSink(options.db_path, embedder=embedder)
        self._writing = asyncio.Lock()  # a batch or a maintenance pass, never both at once
        self._maintained_at = 0
        self._maintenance: asyncio.Task[None] | None = None
        self.processor = Processor(
            "sink",
            inputs=options.topics,
            handle_batch=self.write,
            timers=(Timer(options.maintain_every_s, self.maintain),),
            group=options.group_id,
            on_assigned=self.assigned,
            max_records=options.max_records,
            gather_s=options.gather_s,
            fatal=(OSError,),
        )
        self.runtime = Runtime(settings, self.processor)

    async def write(self, records: list[Delivery], ctx: Context) -> None:
        """Write one gathered batch durably (one commit per table)."""
        async with self._writing:
            await self.sink.handle(records)
        log.info("batch of %d: %s", len(records), self.sink.stats)

    async def assigned(self, partitions: set[int], ctx: Context) -> None:
        """New partitions: another sink of the group may have written their records up to
        where it stopped (a crash between its write and its commit), so what the tables
        hold is read again from their latest version before the next batch."""
        async with self._writing:
            await asyncio.to_thread(self._reread)

    def _reread(self) -> None:
        self.sink.refresh()
        self.sink.forget()

    async def maintain(self, tick: Tick) -> None:
        """Timer: start a maintenance pass if something was written since the last one
        (in the background: consumption goes on, writes wait for the pass)."""
        running = self._maintenance is not None and not self._maintenance.done()
        if not running and self.sink.stats.batches != self._maintained_at:
            self._maintained_at = self.sink.stats.batches
            self._maintenance = asyncio.create_task(self._pass())

    async def _pass(self) -> None:
        async with self._writing:
            await _maintain(self.sink, self.options.keep_versions)

    async def serve(self) -> LanceSink:
        """Run until SIGINT / SIGTERM (or idle); an idle exit leaves indexed tables."""
        for name in self.sink.tables():
            self.sink.watermark(name)  # resume point, read once
        try:
            await self.runtime.serve(idle_timeout=self.options.idle_timeout_s)
        finally:
            if self._maintenance is not None and self.runtime.stopping:
                self._maintenance.cancel()  # stop promptly: a pass under way is abandoned
        if self._maintenance is not None:
            await asyncio.gather(self._maintenance, return_exceptions=True)
        if not self.runtime.stopping:
            await self._pass()
        return self.sink


async def run_sink(
    settings: Settings, options: SinkOptions, embedder: Embedder | None = None
) -> LanceSink:
    """Sink the topics into ``options.db_path`` until stopped (or idle)."""
    return await SinkWorker(settings, options, embedder).serve()


async def _maintain(sink: LanceSink, keep_versions: timedelta) -> None:
    """One maintenance pass in a child process (:mod:`.maintain`: LanceDB keeps the memory
    an in-process pass allocates), then the sink's tables see its result."""
    started = time.monotonic()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "safactory.sinks.maintain",
        sink.location.uri,
        "--keep-seconds",
        str(keep_versions.total_seconds()),
        env=sink.location.child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await child.communicate()
    except asyncio.CancelledError:  # a stop: the pass is abandoned (nothing half-committed)
        child.kill()
        await child.wait()
        raise
    if child.returncode != 0:
        log.warning(
            "maintenance failed (exit %s): %s",
            child.returncode,
            err.decode(errors="replace").strip().splitlines()[-1:],
        )
    sink.refresh()
    made = out.decode().split()
    log.info("maintenance in %.1fs; new indexes: %s", time.monotonic() - started, made or "none")
