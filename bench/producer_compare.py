"""Producer: aiokafka's own ``send`` against batches built by hand, side by side, one broker.

"send" is :class:`EventProducer` (aiokafka's ``AIOKafkaProducer.send``; its accumulator
batches per partition for ``linger_ms`` and while the partition's previous batch is in
flight), at its default linger of 0 and at ``--linger-ms``. "batches" is the design it
replaced (commit fe3a51f, kept here to measure against): one record batch per partition
filled with aiokafka's internal ``BatchBuilder``, handed to ``send_batch`` when full, after
``linger_ms``, or at once on ``publish``; batches of a partition handed over one after
another's ack. Both encode the same pre-built Step events (about 1 KB each) with the same
codec; acks=all, idempotence, 256 KB batches.

Two shapes, each on a fresh topic per measurement, sides alternating within a round:
- episodes: ``--episodes`` coroutines, each ``await publish(step)`` for ``--steps`` steps
  (the agents' path: one publish per step, many concurrent episodes); steps/s and p50/p99
  publish latency;
- publish_many: one ``publish_many`` of ``--events`` events; events/s.
Both also report the benchmark process's CPU time per event, which a busy shared machine
disturbs less than wall-clock rates (the broker's CPU is not in it).

    python bench/producer_compare.py --episodes 64 --steps 200 --events 50000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata

from safactory import schemas as s
from safactory.infra import aio
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, create_topics
from safactory.schemas import codec


class Publisher(Protocol):
    """What both sides offer: start/stop, publish one, publish many."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def publish(self, event: s.Event) -> RecordMetadata: ...
    async def publish_many(self, events: Iterable[s.Event]) -> list[RecordMetadata]: ...


# ------------------------------------------------------------------ the design replaced


@dataclass
class _OpenBatch:
    builder: BatchBuilder
    waiters: list[asyncio.Future[RecordMetadata]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class HandBuiltBatches:
    """The producer as of commit fe3a51f, trimmed to what the benchmark calls."""

    def __init__(self, settings: Settings, linger_ms: float) -> None:
        self.settings = settings
        self._linger_s = linger_ms / 1000
        self._producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap,
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            max_batch_size=256 * 1024,
            max_request_size=codec.MAX_PAYLOAD_BYTES + 64 * 1024,
        )
        self._partitions: dict[str, list[int]] = {}
        self._open: dict[tuple[str, int], _OpenBatch] = {}
        self._handover: dict[tuple[str, int], asyncio.Future[None]] = {}

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        self._hand_over_now()
        await asyncio.gather(*self._handover.values(), return_exceptions=True)
        await self._producer.stop()

    async def send(self, event: s.Event) -> asyncio.Future[RecordMetadata]:
        record = codec.encode(event)
        topic = self.settings.topic(event.TOPIC)
        partitions = self._partitions.get(topic)
        if partitions is None:
            partitions = self._partitions[topic] = sorted(
                await self._producer.partitions_for(topic)
            )
        tp = (topic, partitions[(murmur2(record.key) & 0x7FFFFFFF) % len(partitions)])
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = self._new_batch(tp)
        if (
            batch.builder.append(
                timestamp=None, key=record.key, value=record.value, headers=record.headers
            )
            is None
        ):
            self._hand_over(tp)
            batch = self._open[tp] = self._new_batch(tp)
            batch.builder.append(
                timestamp=None, key=record.key, value=record.value, headers=record.headers
            )
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        batch.waiters.append(future)
        return future

    async def publish(self, event: s.Event) -> RecordMetadata:
        future = await self.send(event)
        self._hand_over_now()
        return await future

    async def publish_many(self, events: Iterable[s.Event]) -> list[RecordMetadata]:
        futures = [await self.send(e) for e in events]
        self._hand_over_now()
        return list(await asyncio.gather(*futures))

    def _new_batch(self, tp: tuple[str, int]) -> _OpenBatch:
        batch = _OpenBatch(self._producer.create_batch())
        batch.timer = asyncio.get_running_loop().call_later(self._linger_s, self._hand_over, tp)
        return batch

    def _hand_over_now(self) -> None:
        for tp in list(self._open):
            self._hand_over(tp)

    def _hand_over(self, tp: tuple[str, int]) -> None:
        batch = self._open.pop(tp, None)
        if batch is None:
            return
        if batch.timer is not None:
            batch.timer.cancel()
        previous = self._handover.get(tp)
        self._handover[tp] = asyncio.ensure_future(self._send_batch(tp, batch, previous))

    async def _send_batch(
        self, tp: tuple[str, int], batch: _OpenBatch, previous: asyncio.Future[None] | None
    ) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        try:
            first = await (await self._producer.send_batch(batch.builder, tp[0], partition=tp[1]))
        except Exception as exc:
            for waiter in batch.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for i, waiter in enumerate(batch.waiters):
            if not waiter.done():
                waiter.set_result(first._replace(offset=first.offset + i))


# ------------------------------------------------------------------ the shapes


def step(episode: int, index: int) -> s.Step:
    """A step whose JSON encoding is about 1 KB."""
    return s.Step(
        episode_id=f"ep-{episode}",
        step_index=index,
        env="os",
        task_id="bench",
        policy_version=1,
        action=s.Action(text="ls -la ~/docs"),
        observation="x" * 640,
    )


def make(side: str, settings: Settings, linger_ms: float) -> Publisher:
    if side == "batches":
        return HandBuiltBatches(settings, linger_ms)
    return EventProducer(settings, linger_ms=linger_ms)  # type: ignore[return-value]


async def fresh_topic(bootstrap: str) -> Settings:
    settings = Settings(kafka_bootstrap=bootstrap, topic_prefix=f"pc{uuid.uuid4().hex[:8]}.")
    await create_topics(settings, [BY_NAME["steps"]])
    return settings


async def warm_up(producer: Publisher) -> None:
    """Every partition's leader known and written to before the clock starts."""
    await producer.publish_many([step(10_000 + e, 0) for e in range(64)])


async def episodes(
    side: str, bootstrap: str, linger_ms: float, n_episodes: int, n_steps: int
) -> dict[str, float]:
    """``n_episodes`` coroutines publish ``n_steps`` steps each, one ``publish`` at a time."""
    settings = await fresh_topic(bootstrap)
    work = [[step(e, i) for i in range(n_steps)] for e in range(n_episodes)]
    latencies: list[float] = []
    producer = make(side, settings, linger_ms)
    await producer.start()
    await warm_up(producer)

    async def episode(steps: Sequence[s.Step]) -> None:
        for event in steps:
            t0 = time.perf_counter()
            await producer.publish(event)
            latencies.append(time.perf_counter() - t0)

    start, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(episode(w) for w in work))
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    await producer.stop()
    q = statistics.quantiles(latencies, n=100)
    return {
        "steps/s": len(latencies) / wall,
        "p50 ms": q[49] * 1000,
        "p99 ms": q[98] * 1000,
        "cpu µs/step": cpu / len(latencies) * 1e6,
    }


async def many(side: str, bootstrap: str, linger_ms: float, n_events: int) -> dict[str, float]:
    """One ``publish_many`` of ``n_events`` events over 64 episode keys."""
    settings = await fresh_topic(bootstrap)
    events = [step(i % 64, i) for i in range(n_events)]
    producer = make(side, settings, linger_ms)
    await producer.start()
    await warm_up(producer)
    start, cpu = time.perf_counter(), time.process_time()
    acks = await producer.publish_many(events)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    await producer.stop()
    assert len(acks) == n_events
    return {"events/s": n_events / wall, "cpu µs/event": cpu / n_events * 1e6}


async def main(args: argparse.Namespace) -> None:
    sides = [("send", 0.0), ("send", args.linger_ms), ("batches", args.linger_ms)]
    runs: dict[tuple[str, str, float], list[dict[str, float]]] = {}
    for r in range(args.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for side, linger in order:
            runs.setdefault(("episodes", side, linger), []).append(
                await episodes(side, args.bootstrap, linger, args.episodes, args.steps)
            )
            runs.setdefault(("publish_many", side, linger), []).append(
                await many(side, args.bootstrap, linger, args.events)
            )
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    print(
        f"\n{args.episodes} episodes x {args.steps} steps; publish_many of {args.events}; "
        f"median (min–max) of {args.rounds} rounds"
    )
    for (shape, side, linger), results in runs.items():
        shown = ", ".join(
            f"{k} {statistics.median(r[k] for r in results):,.1f} "
            f"({min(r[k] for r in results):,.1f}–{max(r[k] for r in results):,.1f})"
            for k in results[0]
        )
        print(f"{shape:13s} {side:8s} linger {linger:g} ms: {shown}")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--linger-ms",
        type=float,
        default=5.0,
        help="linger of 'batches' and of the second 'send' (the first: 0)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    aio.run(main(parse()))  # the workers' event loop (uvloop unless SF_EVENT_LOOP=asyncio)
