"""When and how the sink's maintenance passes run beside its writes.

Compaction, indexes and cleanup of untagged old versions run in a child process
(:mod:`.maintain`: LanceDB keeps the memory an in-process pass allocates), in the
background so consumption goes on, and never at the same time as a write: writes and passes
take one lock. A pass starts only if something was written since the last one.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from .lance import LanceSink

if TYPE_CHECKING:
    from ..infra.processor import Tick

log = logging.getLogger(__name__)


class MaintenancePasses:
    """The sink's maintenance passes, one at a time, each under the write lock."""

    def __init__(self, sink: LanceSink, keep_versions: timedelta) -> None:
        self.sink = sink
        self.keep_versions = keep_versions
        self.writing = asyncio.Lock()
        """Held by a write or a pass, never both at once."""
        self._maintained_at = 0
        self._task: asyncio.Task[None] | None = None

    async def due(self, tick: Tick) -> None:
        """Timer: start a pass in the background if something was written since the last
        one and none is under way."""
        running = self._task is not None and not self._task.done()
        if not running and self.sink.stats.batches != self._maintained_at:
            self._maintained_at = self.sink.stats.batches
            self._task = asyncio.create_task(self.run())

    async def run(self) -> None:
        """One pass, once no write is in hand."""
        async with self.writing:
            await maintain_in_child(self.sink, self.keep_versions)

    def abandon(self) -> None:
        """Cancel a pass under way (a stop: nothing is half-committed)."""
        if self._task is not None:
            self._task.cancel()

    async def finish(self, *, final: bool) -> None:
        """Wait for a pass under way; with ``final``, run one more (tables left indexed)."""
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        if final:
            await self.run()


async def maintain_in_child(sink: LanceSink, keep_versions: timedelta) -> None:
    """One maintenance pass in a child process (:mod:`.maintain`), then the sink's tables
    see its result."""
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
