"""The sink worker: consume the factory's topics in batches into LanceDB, maintain it.

Every LanceDB write is a commit, and every commit a new table version with its own manifest,
so the worker gathers deliveries (up to ``max_records`` or ``gather_s`` seconds) and writes
them in one commit per table; Kafka offsets commit only after that write (at-least-once; the
sink drops ids it already holds). Compaction and cleanup of old untagged versions run every
``maintain_every_s`` seconds that saw writes, keeping ``keep_versions`` of history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from ..infra import aio, metrics
from ..infra.config import Settings
from ..infra.consumer import Delivery, EventConsumer
from .embed import Embedder
from .lance import LanceSink
from .tables import TOPICS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SinkOptions:
    """How the sink worker runs."""

    db_path: Path
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


async def run_sink(
    settings: Settings, options: SinkOptions, embedder: Embedder | None = None
) -> LanceSink:
    """Run until SIGINT / SIGTERM (or idle): write each gathered batch, then commit its
    offsets; maintain the tables on schedule. An idle exit also builds missing indexes."""
    metrics.serve(settings, "sink")
    sink = LanceSink(options.db_path, embedder=embedder)
    for name in sink.tables():
        sink.watermark(name)  # resume point, read once
    writing = asyncio.Lock()  # one writer: a batch or maintenance, never both at once

    async def write(deliveries: list[Delivery]) -> None:
        async with writing:
            await sink.handle(deliveries)
        log.info("batch of %d: %s", len(deliveries), sink.stats)

    finished = asyncio.Event()

    async def maintain_on_schedule() -> None:
        maintained_at = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), options.maintain_every_s)
            last = finished.is_set()  # an idle exit: a last pass leaves indexed tables
            if last or sink.stats.batches != maintained_at:  # or something was written
                maintained_at = sink.stats.batches
                async with writing:
                    await _maintain(sink, options.keep_versions)
            if last:
                return

    consumer = EventConsumer(
        options.topics,
        settings.group(options.group_id),
        batch_handler=write,
        settings=settings,
        max_records=options.max_records,
        gather_s=options.gather_s,
    )
    signalled: list[bool] = []

    def request_stop() -> None:
        signalled.append(True)
        consumer.request_stop()

    with aio.stop_on_signals(request_stop):
        async with consumer:
            maintenance = asyncio.create_task(maintain_on_schedule())
            try:
                await consumer.run(idle_timeout=options.idle_timeout_s)
            except BaseException:
                maintenance.cancel()
                raise
            if signalled:  # stop promptly: a pass under way ends in its thread
                maintenance.cancel()
            else:
                finished.set()
        if not signalled:
            await maintenance
    return sink


async def _maintain(sink: LanceSink, keep_versions: timedelta) -> None:
    """One maintenance pass in a child process (:mod:`.maintain`: LanceDB keeps the memory
    an in-process pass allocates), then the sink's tables see its result."""
    started = time.monotonic()
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "safactory.sinks.maintain",
        str(sink.path),
        "--keep-seconds",
        str(keep_versions.total_seconds()),
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
