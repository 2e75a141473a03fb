"""The event loop of the long-running processes: uvloop by default, plain asyncio on request.

``SF_EVENT_LOOP=asyncio`` (or ``event_loop = "asyncio"`` in the config file) switches back,
e.g. to debug with asyncio's debug mode.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .config import Settings, get_settings

T = TypeVar("T")


def loop_factory(settings: Settings | None = None) -> Callable[[], asyncio.AbstractEventLoop]:
    """A constructor of the configured event loop."""
    if (settings or get_settings()).event_loop == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def run(main: Coroutine[Any, Any, T], settings: Settings | None = None) -> T:
    """``asyncio.run`` on the configured event loop."""
    with asyncio.Runner(loop_factory=loop_factory(settings)) as runner:
        return runner.run(main)


def tune_gc(young_threshold: int = 20_000) -> None:
    """Garbage collection for a latency-sensitive worker, once its startup is done.

    Freezes what startup built (modules, models, compiled patterns: a full collection no
    longer walks them) and collects young objects every ``young_threshold`` allocations
    instead of 700, with older generations visited 50 times less often than that. Most
    per-event objects die by reference counting; with the defaults the audit worker paused
    for 150–350 ms every few thousand steps (its p99 at 2,000 steps/s went from about 290 ms
    to about 50 ms with this, ``bench/audit_latency.py``)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(young_threshold, 50, 50)
