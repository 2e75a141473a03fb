"""Event-bus throughput: raw aiokafka against Safactory's helpers, side by side, one broker.

Raw: pre-encoded 1 KB byte payloads, AIOKafkaProducer (acks=all, idempotent, per-event
``send``) and a plain AIOKafkaConsumer (auto-commit, its default). Ours: build each Step
event (pydantic validation), encode it, stamp the contract headers and send it through
EventProducer (per-event ``send``; batched ``publish_many`` reported beside it); consume
through the processor runtime every worker runs on (``infra/processor.py``: decode,
validate, header/payload agreement, the processor's function per record, commit of handled
offsets every second). Same producer tuning on both sides; every measurement uses a fresh
topic; rounds alternate raw/ours and the median round is reported. Consumption is timed
from the group join on, on both sides.

For reference, "raw+json" is raw aiokafka plus the least any application does with an event:
``json.dumps`` of the same fields on the way in, ``json.loads`` on the way out (no
validation, no headers). The same fields are every field our step carries on the wire,
defaults included (1,084 B; until 2026-12 it was the 7 fields the bench fills in, 760 B of
JSON that parses twice as fast, so the ratio mixed payload size into the framework's cost).

Two shapes, both reported:
- sequential: produce N, then consume N in the same process (each phase timed alone);
- pipelined: the consumer runs in its own process while the producer sends, as agents and
  auditors do; events/s = N / (last event consumed − first event sent).

Targets: issue 2, ours ≥ 70 % of raw aiokafka's events/s; issue 20, ours ≥ 70 % of
raw+json on produce, consume and pipelined.

    python bench/bus.py --events 30000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.infra.processor import Context, Processor, Runtime
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, create_topics, delete_topics_where

PAYLOAD_BYTES = 1024
CHUNK = 2000
PRODUCER_TUNING = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": 5,
    "max_batch_size": 256 * 1024,
}
SIDES = ("raw", "raw+json", "send", "publish_many")


def step_fields(i: int) -> dict[str, object]:
    """Fields of a step whose JSON encoding is about 1 KB."""
    return {
        "episode_id": f"ep-{i % 64}",
        "step_index": i,
        "env": "os",
        "task_id": "bench",
        "policy_version": 1,
        "action": {"text": "ls -la ~/docs"},
        "observation": "x" * 640,
    }


_WIRE = s.Step.model_validate(step_fields(0)).model_dump(mode="json")


def wire_fields(i: int) -> dict[str, object]:
    """Every field our step carries on the wire (defaults included), as a plain dict: what
    raw+json encodes and decodes, so that side handles the same data ours does."""
    return {**_WIRE, "event_id": f"ep-{i % 64}-{i}", "episode_id": f"ep-{i % 64}", "step_index": i}


# ------------------------------------------------------------------ producing


async def produce(side: str, settings: Settings, n: int) -> float:
    """Send ``n`` events; returns the wall time at which the first one was sent."""
    if side.startswith("raw"):
        payload = b"y" * PAYLOAD_BYTES
        as_json = side == "raw+json"
        producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, **PRODUCER_TUNING)
        await producer.start()
        start = time.time()
        topic = settings.topic("steps")
        futures = [
            await producer.send(
                topic,
                json.dumps(wire_fields(i)).encode() if as_json else payload,
                key=f"ep-{i % 64}".encode(),
            )
            for i in range(n)
        ]
        await asyncio.gather(*futures)
        await producer.stop()
        return start
    async with EventProducer(settings, **PRODUCER_TUNING) as ours:
        start = time.time()
        if side == "publish_many":  # as a bulk importer or a replay would
            for lo in range(0, n, CHUNK):
                chunk = [
                    s.Step.model_validate(step_fields(i)) for i in range(lo, min(n, lo + CHUNK))
                ]
                await ours.publish_many(chunk)
        else:  # one send per event, as an agent publishing steps live
            futures = [await ours.send(s.Step.model_validate(step_fields(i))) for i in range(n)]
            await asyncio.gather(*futures)
    return start


# ------------------------------------------------------------------ consuming


async def consume(side: str, settings: Settings, n: int, ready: Callable[[], None]) -> float:
    """Consume ``n`` events; call ``ready`` once the group is joined; return the wall time
    at which the last one was handled."""
    group = f"bench-{uuid.uuid4()}"
    if side.startswith("raw"):
        as_json = side == "raw+json"
        raw = AIOKafkaConsumer(
            settings.topic("steps"),
            bootstrap_servers=settings.kafka_bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
        )
        await raw.start()
        await _until(lambda: bool(raw.assignment()), lambda: raw.getmany(timeout_ms=100))
        ready()
        seen = 0
        while seen < n:
            batch = await raw.getmany(timeout_ms=1000, max_records=500)
            for records in batch.values():
                seen += len(records)
                if as_json:
                    for record in records:
                        json.loads(record.value)
        end = time.time()
        await raw.stop()
        return end
    handled = 0
    done = 0.0
    runtime: Runtime

    async def handle(_: Delivery, ctx: Context) -> None:  # the function every worker gives
        nonlocal handled, done
        handled += 1
        if handled == n:
            done = time.time()
            runtime.request_stop()

    async def joined(partitions: set[int], ctx: Context) -> None:
        ready()

    processor = Processor("bench", inputs=("steps",), handle=handle, on_assigned=joined)
    runtime = Runtime(settings, processor, worker="audit")
    await runtime.serve()
    return done


async def _until(done: Callable[[], bool], step: Callable[[], Awaitable[object]]) -> None:
    while not done():
        await step()


def _consumer_process(side: str, prefix: str, bootstrap: str, n: int, conn: object) -> None:
    settings = Settings(kafka_bootstrap=bootstrap, topic_prefix=prefix)
    end = asyncio.run(consume(side, settings, n, lambda: conn.send("ready")))  # type: ignore[attr-defined]
    conn.send(end)  # type: ignore[attr-defined]


# ------------------------------------------------------------------ rounds


async def fresh_topics(bootstrap: str) -> Settings:
    settings = Settings(kafka_bootstrap=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
    await create_topics(settings, [BY_NAME["steps"], BY_NAME["dlq"]])
    return settings


async def drop_topics(settings: Settings) -> None:
    """Delete a round's topics: a broker that keeps every bench's partitions slows down."""
    await delete_topics_where(settings, lambda t: t.startswith(settings.topic_prefix))


async def sequential(side: str, bootstrap: str, n: int) -> tuple[float, float]:
    """Events/s of producing, then of consuming, the same ``n`` events."""
    settings = await fresh_topics(bootstrap)
    start = await produce(side, settings, n)
    produce_s = time.time() - start
    joined: list[float] = []  # timed from the group join on, on both sides: the start-up of
    end = await consume(side, settings, n, lambda: joined.append(time.time()))  # clients is not
    await drop_topics(settings)
    return n / produce_s, n / (end - joined[0])  # throughput (and ours starts one more)


async def pipelined(side: str, bootstrap: str, n: int) -> float:
    """Events/s with the consumer in its own process, running while the producer sends."""
    settings = await fresh_topics(bootstrap)
    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(
        target=_consumer_process, args=(side, settings.topic_prefix, bootstrap, n, child)
    )
    proc.start()
    assert await asyncio.to_thread(parent.recv) == "ready"
    start = await produce(side, settings, n)
    end = await asyncio.to_thread(parent.recv)
    proc.join()
    await drop_topics(settings)
    return n / (end - start)


async def headline(bootstrap: str, n: int) -> dict[str, float]:
    """Ours (``send``) over raw+json on produce, consume and pipelined, one round each
    (``bench/quick.py``), after one discarded warm-up round (the first producer against a
    fresh broker ran at a quarter of its speed, and made ours look 4x faster)."""
    await sequential("raw+json", bootstrap, n)
    json_produce, json_consume = await sequential("raw+json", bootstrap, n)
    ours_produce, ours_consume = await sequential("send", bootstrap, n)
    json_pipe = await pipelined("raw+json", bootstrap, n)
    ours_pipe = await pipelined("send", bootstrap, n)
    return {
        "produce": ours_produce / json_produce,
        "consume": ours_consume / json_consume,
        "pipelined": ours_pipe / json_pipe,
    }


async def main(args: argparse.Namespace) -> None:
    encoded = len(s.encode(s.Step.model_validate(step_fields(0))).value)
    print(
        f"{args.events} events per measurement; our step payload {encoded} B, "
        f"raw payload {PAYLOAD_BYTES} B; {args.rounds} rounds"
    )
    seq: dict[str, list[tuple[float, float]]] = {k: [] for k in SIDES}
    pipe: dict[str, list[float]] = {k: [] for k in SIDES}
    for r in range(args.rounds):
        for side in SIDES:
            seq[side].append(await sequential(side, args.bootstrap, args.events))
            pipe[side].append(await pipelined(side, args.bootstrap, args.events))
        print(
            f"round {r + 1}: "
            + " | ".join(
                f"{k}: produce {seq[k][-1][0]:,.0f}/s consume {seq[k][-1][1]:,.0f}/s "
                f"pipelined {pipe[k][-1]:,.0f}/s"
                for k in SIDES
            )
        )

    med = statistics.median
    table = {
        "produce (sequential)": {k: med(p for p, _ in seq[k]) for k in SIDES},
        "consume (sequential)": {k: med(c for _, c in seq[k]) for k in SIDES},
        "produce then consume": {k: med(1 / (1 / p + 1 / c) for p, c in seq[k]) for k in SIDES},
        "pipelined, 2 processes": {k: med(pipe[k]) for k in SIDES},
    }
    print("\nmedian events/s (ratio to raw aiokafka)")
    print(f"{'':<24}" + "".join(f"{k:>20}" for k in SIDES))
    for label, row in table.items():
        cells = "".join(
            f"{row[k]:>11,.0f} ({row[k] / row['raw']:>4.0%})" if k != "raw" else f"{row[k]:>20,.0f}"
            for k in SIDES
        )
        print(f"{label:<24}{cells}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="broker to measure against")
    parser.add_argument("--events", type=int, default=30_000, help="events per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all sides")
    asyncio.run(main(parser.parse_args()))
