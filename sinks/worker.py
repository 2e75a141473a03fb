"""The sink worker: consume the factory's topics in batches into LanceDB, maintain it."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from ..infra.config import Settings
from ..infra.consumer import EventConsumer
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
    max_records: int = 1000
    maintain_every_s: float = 300.0
    idle_timeout_s: float | None = None
    """Return after this long without records (tests, one-shot backfills); None: run on."""


async def run_sink(
    settings: Settings, options: SinkOptions, embedder: Embedder | None = None
) -> LanceSink:
    """Run until stopped (or idle): write each polled batch, then commit its offsets."""
    sink = LanceSink(options.db_path, embedder=embedder)
    for name in sink.tables():
        sink.watermark(name)  # resume point, read once
    consumer = EventConsumer(
        options.topics, settings.group(options.group_id), batch_handler=sink.handle,
        settings=settings, max_records=options.max_records,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    last_record = last_maintained = loop.time()
    async with consumer:
        while True:
            count = await consumer.poll_once(timeout_ms=500)
            now = loop.time()
            if count:
                last_record = now
                log.info("batch of %d: %s", count, sink.stats)
            if now - last_maintained >= options.maintain_every_s:
                await asyncio.to_thread(_maintain, sink)
                last_maintained = loop.time()
            idle = options.idle_timeout_s
            if idle is not None and now - last_record >= idle:
                break
    await asyncio.to_thread(sink.ensure_indexes)
    return sink


def _maintain(sink: LanceSink) -> None:
    started = time.monotonic()
    made = sink.ensure_indexes()
    sink.maintain()
    log.info("maintenance in %.1fs; new indexes: %s", time.monotonic() - started, made or "none")
