"""A rebalance is normal, never fatal: a handler that holds the event loop past the group's
session timeout, with its batch in hand when the commit falls due, costs a rejoin and a
re-read, not the worker (the README demo's audit worker died of this on a cold machine:
``CommitFailedError`` from the commit after its stalled batch).

The stalled record is the last of its batch and its handler emits nothing, so the commit is
sent before the heartbeat task can notice the expired session: the broker refuses it as
from an unknown member, deterministically."""

from __future__ import annotations

import asyncio
import time

import pytest
from topic_records import committed

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.infra.processor import Context, Processor, Runtime
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, Step

pytestmark = pytest.mark.integration

SESSION_MS = 6_000
"""The broker's smallest allowed session timeout (``group.min.session.timeout.ms``)."""


def step(episode: str, index: int) -> Step:
    return Step(
        episode_id=episode,
        step_index=index,
        env="t",
        task_id="t",
        policy_version=0,
        action=Action(text=f"echo {index}"),
    )


async def until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


async def test_a_stalled_loop_costs_a_rejoin_not_the_worker(
    topics: Settings, producer: EventProducer
) -> None:
    handled: list[str] = []
    stall_on = step("stall", 0)
    stalled: list[float] = []

    async def handle(record: Delivery, ctx: Context) -> None:
        if record.event.event_id == stall_on.event_id and not stalled:
            stalled.append(time.monotonic())
            time.sleep(SESSION_MS / 1000 + 3)  # noqa: ASYNC251 (a cold load, on the loop)
        handled.append(record.event.event_id)

    processor = Processor(
        "stall",
        inputs=("steps",),
        handle=handle,
        kafka={"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": 500},
    )
    runtime = Runtime(topics, processor, worker="audit")
    serving = asyncio.create_task(runtime.serve())
    try:
        before = [step(f"e{n}", 0) for n in range(10)]
        await producer.publish_many(before)
        await until(lambda: len(set(handled)) >= len(before) or serving.done(), 60)
        await producer.publish_many([stall_on])  # alone in its batch: the commit comes next
        await until(lambda: stall_on.event_id in handled or serving.done(), 60)
        after = [step(f"f{n}", 0) for n in range(10)]
        await producer.publish_many(after)
        everything = {s.event_id for s in (*before, stall_on, *after)}
        await until(lambda: everything <= set(handled) or serving.done(), 90)
        assert not serving.done(), f"the worker ended: {serving.exception()!r}"
        consumer = runtime.consumer()
        assert consumer.stats.commits_rebalanced >= 1  # the stall did cost a rebalance
        await until(lambda: bool(consumer.assignment()), 60)  # and it rejoined
        await consumer.commit()
    finally:
        runtime.request_stop()
        await asyncio.gather(serving, return_exceptions=True)
    assert everything <= set(handled)  # none lost (the stalled one may be handled twice)
    offsets = await committed(topics, topics.group("stall"))
    assert sum(offsets.values()) == len(everything)  # committed up to the end


async def test_a_slow_batch_is_cut_and_the_rest_read_again_once(
    topics: Settings, producer: EventProducer
) -> None:
    """A handler slow enough that one polled batch would outlast the runtime's batch budget:
    the batch is cut, what was handled is committed, the rest is read again, and no record
    is handled twice or skipped."""
    handled: list[str] = []

    async def handle(record: Delivery, ctx: Context) -> None:
        await asyncio.sleep(0.05)  # a slow judge: 500 records would take 25 s
        handled.append(record.event.event_id)

    runtime = Runtime(topics, Processor("slow", inputs=("steps",), handle=handle), worker="audit")
    steps = [step(f"s{n % 3}", n) for n in range(300)]
    await producer.publish_many(steps)
    serving = asyncio.create_task(runtime.serve())
    try:
        await until(lambda: len(handled) >= len(steps) or serving.done(), 120)
        assert not serving.done(), f"the worker ended: {serving.exception()!r}"
        consumer = runtime.consumer()
        assert consumer.stats.batches_cut >= 2
    finally:
        runtime.request_stop()
        await asyncio.gather(serving, return_exceptions=True)
    assert sorted(handled) == sorted(s.event_id for s in steps)  # each once, in order per episode
    for episode in ("s0", "s1", "s2"):
        mine = [s.event_id for s in steps if s.episode_id == episode]
        assert [h for h in handled if h in set(mine)] == mine
    offsets = await committed(topics, topics.group("slow"))
    assert sum(offsets.values()) == len(steps)
