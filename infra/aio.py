"""The event loop of the long-running processes: uvloop by default, plain asyncio on request;
their garbage collection; how they stop on SIGINT / SIGTERM; and how a Kafka client is
stopped mid-flow.

``SF_EVENT_LOOP=asyncio`` (or ``event_loop = "asyncio"`` in the config file) switches back,
e.g. to debug with asyncio's debug mode.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from . import metrics
from .config import Settings, get_settings

T = TypeVar("T")
log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_DEADLINE_S = 9.5
"""Longest a worker may take to stop after SIGINT / SIGTERM before it is ended at once."""


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


class YoungCollector:
    """Collects the young generation on a clock and freezes what survives.

    CPython starts a young collection once allocations of tracked objects exceed their
    deallocations by the threshold. A worker whose working set churns (the auditor's decoded
    contexts: each new step's objects replace an evicted step's) frees about as much as it
    allocates, so the count rises slowly, young collections come seconds apart and each walks
    every object that survived meanwhile: 70-100 ms pauses every 6 s at 2,000 steps/s, the
    p99 of ``bench/audit_latency.py``. Called between batches, :meth:`tick` collects the young
    generation every ``every_s`` (pauses ≤ 14 ms there) and freezes the survivors, so no later
    collection walks them again. Frozen objects are still freed by reference counting; a
    reference cycle among them is found by the full collection every ``full_every_s``."""

    def __init__(self, every_s: float = 0.25, full_every_s: float = 600.0) -> None:
        self.every_s = every_s
        self.full_every_s = full_every_s
        self._last = self._last_full = time.monotonic()

    def tick(self, now: float | None = None) -> None:
        """Collect if ``every_s`` passed since the last collection (``now``: monotonic s)."""
        now = time.monotonic() if now is None else now
        if now - self._last < self.every_s:
            return
        self._last = now
        if now - self._last_full >= self.full_every_s:
            self._last_full = now
            started = time.perf_counter()
            gc.unfreeze()
            found = gc.collect()
            log.info(
                "full collection: %d unreachable objects, %.0f ms",
                found,
                (time.perf_counter() - started) * 1000,
            )
        else:
            gc.collect(0)
        gc.freeze()


@contextmanager
def stop_on_signals(
    request_stop: Callable[[], None], *, deadline_s: float = EXIT_DEADLINE_S
) -> Iterator[None]:
    """Within the block (on the running loop's thread), SIGINT or SIGTERM asks the worker to
    stop: ``request_stop()`` runs on the loop, and the worker finishes or abandons the batch
    in hand, commits what it handled and leaves its group. A process still alive
    ``deadline_s`` later (a thread that cannot be cancelled, a broker that does not answer),
    or a second signal, ends at once with status 128 + the signal number: nothing is lost,
    since offsets are committed only after records were handled. Outside the main thread
    this does nothing (signals are delivered there only).

    The handlers are Python-level (``signal.signal``), so they also run while the loop is
    busy in Python code; the previous handlers come back when the block exits."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if received:
            _exit_now(signum, "second signal")
        received.append(signum)
        watchdog = threading.Timer(
            deadline_s, _exit_now, (signum, f"not stopped {deadline_s:g}s after the signal")
        )
        watchdog.daemon = True
        watchdog.start()
        loop.call_soon_threadsafe(request_stop)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _exit_now(signum: int, why: str) -> None:
    """End the process without cleanup (the last resort of :func:`stop_on_signals`)."""
    print(f"{signal.Signals(signum).name}: {why}; exiting now", file=sys.stderr, flush=True)
    os._exit(128 + signum)


class LoopWatch:
    """Measures how long the event loop is held: a timer set every ``every_s`` that wakes
    late was kept waiting by synchronous work on the loop (a model load, a long handler) or
    by a stopped process. A group member's heartbeats run on the same loop, so a stall
    near the session timeout costs a rebalance; each stall is observed in
    ``sf_loop_stall_seconds`` and one past ``warn_s`` is logged with its length."""

    def __init__(self, every_s: float = 0.25, warn_s: float = 2.0) -> None:
        self.every_s = every_s
        self.warn_s = warn_s
        self.longest = 0.0
        """The longest stall seen, in seconds."""
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start watching the running loop."""
        self._task = asyncio.get_running_loop().create_task(self._watch())

    def stop(self) -> None:
        """Stop watching."""
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + self.every_s
            await asyncio.sleep(self.every_s)
            late = loop.time() - due
            if late >= 0.05:
                metrics.loop_stalled(late)
                self.longest = max(self.longest, late)
                if late >= self.warn_s:
                    log.warning("event loop held for %.1f s (heartbeats wait meanwhile)", late)


def cancelled_by_someone_else(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``CancelledError`` that did not come from cancelling the
    current task (``Task.cancelling()`` is 0): a library re-raising the cancellation of a
    task of its own. aiokafka's ``AIOKafkaConsumer.stop()`` does so when it closes while
    fetches to a dead broker are pending (aiokafka issue #647)."""
    task = asyncio.current_task()
    return isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() == 0


async def stop_client(client: Any, what: str) -> None:
    """``await client.stop()``; a ``CancelledError`` it raises while nobody cancels the
    caller is logged and swallowed (see :func:`cancelled_by_someone_else`), so a caller
    that goes on after closing a client (a state restore) is not cut off mid-way."""
    try:
        await client.stop()
    except asyncio.CancelledError as exc:
        if not cancelled_by_someone_else(exc):
            raise
        log.warning(
            "%s: stopping its Kafka client raised CancelledError (broker down?); "
            "the client is closed all the same",
            what,
        )
