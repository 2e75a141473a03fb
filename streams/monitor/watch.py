"""The terminal dashboard's loop (``safactory monitor``), apart from how it draws: the topics
followed into a :class:`LiveView`, its snapshot drawn at a :class:`Pace`, and keys typed on a
terminal read meanwhile (cbreak mode): ``q`` quits, as do SIGINT and SIGTERM; ``a`` approves
and ``d`` denies the episode that has waited longest for approval (the answer is published
on ``sf.control``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import termios
import tty
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from ...infra.config import Settings
from ...infra.producer import EventProducer
from ..control import answer
from .follow import Follower
from .view import LiveView, Pace, WarningsToView

TICK_S = 0.05
"""How often the dashboard looks for a change (a change waits at most this long)."""
IDLE_REDRAW_S = 1.0
"""Longest between redraws while nothing arrives (rates decay, the clock moves)."""
Draw = Callable[[dict[str, Any]], None]
"""Draws one snapshot of the view."""


@contextlib.contextmanager
def keys(on_key: Callable[[bytes], None]) -> Iterator[None]:
    """Call ``on_key(bytes)`` for keys typed on a terminal stdin (cbreak mode meanwhile)."""
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    loop = asyncio.get_running_loop()
    try:
        tty.setcbreak(fd)
        loop.add_reader(fd, lambda: on_key(os.read(fd, 64)))
        yield
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def warnings_shown_in(view: LiveView) -> Iterator[None]:
    """Log warnings go to the view's last line instead of over the screen."""
    root = logging.getLogger()
    handler = WarningsToView(view)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


async def watch(
    settings: Settings,
    *,
    from_beginning: bool,
    window_s: float,
    refresh: float,
    connecting: AbstractContextManager[Any],
    screen: AbstractContextManager[Draw],
) -> None:
    """Follow the topics and draw the view inside ``screen`` at most ``refresh`` times a
    second (``connecting`` is shown while the follower starts) until quit."""
    view = LiveView(window_s)
    with warnings_shown_in(view):
        async with EventProducer(settings) as producer:
            follower = Follower(settings, view, from_beginning=from_beginning)
            done = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, done.set)
            try:
                with connecting:
                    await follower.start()
            except Exception:
                await follower.stop()
                raise
            answering: set[asyncio.Task[object]] = set()

            def on_key(typed: bytes) -> None:
                typed = typed.lower()
                if b"q" in typed:
                    done.set()
                for key, approve in ((b"a", True), (b"d", False)):
                    pause = view.oldest_paused()
                    if key in typed and pause is not None:
                        task = asyncio.create_task(
                            producer.publish(answer(pause, approve, "monitor"))
                        )
                        answering.add(task)
                        task.add_done_callback(answering.discard)

            pace = Pace(1.0 / refresh, IDLE_REDRAW_S)
            try:
                with screen as draw, keys(on_key):
                    while not done.is_set():
                        if pace.due(view.seq, loop.time()):
                            draw(view.snapshot())
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(done.wait(), TICK_S)
            finally:
                await follower.stop()
