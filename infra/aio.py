"""The event loop of the long-running processes: uvloop by default, plain asyncio on request.

``SF_EVENT_LOOP=asyncio`` (or ``event_loop = "asyncio"`` in the config file) switches back,
e.g. to debug with asyncio's debug mode.
"""

from __future__ import annotations

import asyncio
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
