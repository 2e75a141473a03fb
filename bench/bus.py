"""Event-bus throughput: raw aiokafka against Safactory's helpers, side by side, one broker.

Raw: pre-encoded 1 KB byte payloads, AIOKafkaProducer (acks=all, idempotent) and a plain
AIOKafkaConsumer (auto-commit, its default). Ours: build each Step event (pydantic
validation), encode, stamp the contract headers and send through EventProducer (per-event
``send``, and batched ``publish_many``); consume through EventConsumer (decode, validate,
header agreement, handler call, commit of handled offsets every second). Same producer
tuning on both sides; each round and side uses a fresh topic.
Rounds alternate raw/ours; the median round is reported. Target: ours ≥ 70% of raw.

    python bench/bus.py --events 30000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, create_topics

PAYLOAD_BYTES = 1024
CHUNK = 2000
PRODUCER_TUNING = {"acks": "all", "enable_idempotence": True, "linger_ms": 5,
                   "max_batch_size": 256 * 1024}  # fmt: skip


def step_fields(i: int) -> dict[str, object]:
    """Fields of a step whose JSON encoding is about 1 KB."""
    return {
        "episode_id": f"ep-{i % 64}", "step_index": i, "env": "os", "task_id": "bench",
        "policy_version": 1, "action": {"text": "ls -la ~/docs"},
        "observation": "x" * 640,
    }  # fmt: skip


async def raw_round(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    payload = b"y" * PAYLOAD_BYTES
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **PRODUCER_TUNING)
    await producer.start()
    t0 = time.perf_counter()
    futures = [await producer.send(topic, payload, key=f"ep-{i % 64}".encode()) for i in range(n)]
    await asyncio.gather(*futures)
    produce_s = time.perf_counter() - t0
    await producer.stop()

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"raw-{uuid.uuid4()}",
                                auto_offset_reset="earliest")  # fmt: skip
    await consumer.start()
    t0 = time.perf_counter()
    seen = 0
    while seen < n:
        batch = await consumer.getmany(timeout_ms=1000, max_records=500)
        seen += sum(len(r) for r in batch.values())
    consume_s = time.perf_counter() - t0
    await consumer.stop()
    return n / produce_s, n / consume_s


async def ours_round(settings: Settings, n: int, batched: bool) -> tuple[float, float]:
    async with EventProducer(settings, **PRODUCER_TUNING) as producer:
        t0 = time.perf_counter()
        if batched:  # publish_many in chunks, as a bulk importer or replay would
            for lo in range(0, n, CHUNK):
                chunk = [
                    s.Step.model_validate(step_fields(i)) for i in range(lo, min(n, lo + CHUNK))
                ]
                await producer.publish_many(chunk)
        else:  # one send per event, as an agent publishing steps live
            futures = [await producer.send(s.Step.model_validate(step_fields(i))) for i in range(n)]
            await asyncio.gather(*futures)
        produce_s = time.perf_counter() - t0

    handled = 0

    async def handle(_: Delivery) -> None:
        nonlocal handled
        handled += 1

    consumer = EventConsumer(["steps"], f"ours-{uuid.uuid4()}", handler=handle, settings=settings)
    await consumer.start()
    t0 = time.perf_counter()
    while handled < n:
        await consumer.poll_once(timeout_ms=1000)
    consume_s = time.perf_counter() - t0
    await consumer.stop()
    return n / produce_s, n / consume_s


async def main(args: argparse.Namespace) -> None:
    encoded = len(s.encode(s.Step.model_validate(step_fields(0))).value)
    print(f"events per round: {args.events}; our step payload {encoded} B, raw {PAYLOAD_BYTES} B")
    rows: dict[str, list[tuple[float, float]]] = {"raw": [], "send": [], "publish_many": []}
    for r in range(args.rounds):
        prefix = f"bench{uuid.uuid4().hex[:6]}."
        settings = Settings(kafka_bootstrap=args.bootstrap, topic_prefix=prefix)
        await create_topics(settings, [BY_NAME["steps"], BY_NAME["dlq"]])
        raw_topic = settings.topic("steps") + "-raw"
        await create_topics(settings.model_copy(update={"topic_prefix": raw_topic[:-5]}),
                            [BY_NAME["steps"]])  # fmt: skip
        rows["raw"].append(await raw_round(args.bootstrap, raw_topic, args.events))
        rows["send"].append(await ours_round(settings, args.events, batched=False))
        settings = settings.model_copy(update={"topic_prefix": prefix + "b."})
        await create_topics(settings, [BY_NAME["steps"], BY_NAME["dlq"]])
        rows["publish_many"].append(await ours_round(settings, args.events, batched=True))
        print(f"round {r + 1}: " + " | ".join(
            f"{k} produce {v[-1][0]:,.0f}/s consume {v[-1][1]:,.0f}/s" for k, v in rows.items()
        ))  # fmt: skip

    def med(name: str, phase: int | None) -> float:
        if phase is None:  # produce then consume the same events
            return statistics.median(1 / (1 / p + 1 / c) for p, c in rows[name])
        return statistics.median(x[phase] for x in rows[name])

    print(f"\nmedian events/s over {args.rounds} rounds")
    print(f"{'':<18}{'raw aiokafka':>14}{'ours: send':>12}{'ratio':>7}"
          f"{'ours: publish_many':>20}{'ratio':>7}")  # fmt: skip
    for label, phase in (("produce", 0), ("consume", 1), ("produce+consume", None)):
        raw, one, many = med("raw", phase), med("send", phase), med("publish_many", phase)
        cells = f"{raw:>14,.0f}{one:>12,.0f}{one / raw:>7.0%}{many:>20,.0f}{many / raw:>7.0%}"
        print(f"{label:<18}{cells}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092", help="broker to measure against")
    parser.add_argument("--events", type=int, default=30_000, help="events per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating raw/ours rounds")
    asyncio.run(main(parser.parse_args()))
