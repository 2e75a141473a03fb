"""The poison-pill check every worker's test runs: a valid record whose handler raises is
dead-lettered with the error, the worker keeps running, and the records after it are
handled (before the runtime, most workers crash-looped on such a record)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiokafka import ConsumerRecord
from topic_records import collect

from safactory.infra.config import Settings
from safactory.infra.processor import Runtime

POISON = "poison-pill"
"""Marker a test's handler raises on."""


class Poisoned(RuntimeError):
    """What a test's handler raises on the poison record."""


async def assert_poison_pill_dead_lettered(
    settings: Settings,
    runtime: Runtime,
    publish: Callable[[], Awaitable[None]],
    handled: Callable[[], bool],
    *,
    wait_s: float = 90.0,
) -> ConsumerRecord:
    """Run ``runtime``, ``publish`` the good, poison and good records, and wait until
    ``handled()`` says the good ones were processed; returns the poison's dead letter."""
    serving = asyncio.create_task(runtime.serve())
    try:
        async with asyncio.timeout(60):
            while not runtime.assigned:
                assert not serving.done(), serving.exception()
                await asyncio.sleep(0.05)
        await publish()
        dead = await collect(settings, settings.topic("dlq"), lambda rs: len(rs) >= 1, wait_s)
        async with asyncio.timeout(wait_s):
            while not handled():
                assert not serving.done(), f"the worker stopped: {serving.exception()!r}"
                await asyncio.sleep(0.1)
        assert not serving.done(), "the worker stopped on the poison record"
    finally:
        runtime.request_stop()
        await asyncio.wait_for(serving, 30)
    assert len(dead) == 1, f"{len(dead)} dead letters"
    error = dict(dead[0].headers)["sf-error"].decode()
    assert error.startswith("handler: Poisoned") and POISON in error, error
    return dead[0]
