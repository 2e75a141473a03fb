"""Long-running workers run on uvloop unless the config asks for plain asyncio."""

from __future__ import annotations

import asyncio

import uvloop

from safactory.infra import aio
from safactory.infra.config import Settings


async def loop_type() -> type:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop())


def test_uvloop_by_default_and_asyncio_on_request(monkeypatch) -> None:
    assert aio.run(loop_type(), Settings()) is uvloop.Loop
    monkeypatch.setenv("SF_EVENT_LOOP", "asyncio")
    assert not issubclass(aio.run(loop_type(), Settings()), uvloop.Loop)
