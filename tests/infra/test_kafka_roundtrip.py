"""Every event type round-trips through the real broker with its headers intact."""

from __future__ import annotations

import asyncio

import pytest

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.consumer import PARTITION_FETCH_BYTES, Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.infra.reader import TopicReader
from safactory.schemas.codec import MAX_PAYLOAD_BYTES

pytestmark = pytest.mark.integration


async def test_every_event_type_round_trips(
    topics: Settings, producer: EventProducer, events: list[s.Event]
) -> None:
    acks = await producer.publish_many(events)
    assert [a.topic for a in acks] == [topics.topic(e.TOPIC) for e in events]

    received: list[Delivery] = []

    async def handle(delivery: Delivery) -> None:
        received.append(delivery)

    names = sorted({e.TOPIC for e in events})
    async with EventConsumer(names, "roundtrip", handler=handle, settings=topics) as consumer:
        while len(received) < len(events):
            assert await consumer.poll_once(timeout_ms=5000) or received, "nothing arrived"
        assert consumer.stats.dead_lettered == 0

    by_id = {d.event.event_id: d for d in received}
    for event in events:
        got = by_id[event.event_id]
        assert got.event == event
        assert type(got.event) is type(event)
        assert list(got.headers) == s.encode(event).headers
        assert got.key == event.key().encode()


async def test_a_record_far_larger_than_a_fetch_asks_of_a_partition_still_arrives(
    topics: Settings, producer: EventProducer
) -> None:
    """A fetch asks PARTITION_FETCH_BYTES of each partition; the broker still answers with a
    whole record batch past it, so a record near the payload limit is read like any other,
    by a consumer group and by a group-less reader, between small records."""
    big_text = "x" * (MAX_PAYLOAD_BYTES - 64 * 1024)
    assert len(big_text) > 4 * PARTITION_FETCH_BYTES
    steps = [
        s.Step(
            episode_id="ep-big",
            step_index=i,
            env="os",
            task_id="t",
            policy_version=0,
            observation=big_text if i == 1 else f"small {i}",
        )
        for i in range(3)
    ]
    await producer.publish_many(steps)

    received: list[s.Step] = []

    async def handle(delivery: Delivery) -> None:
        assert isinstance(delivery.event, s.Step)
        received.append(delivery.event)

    async with EventConsumer(["steps"], "big", handler=handle, settings=topics) as consumer:
        async with asyncio.timeout(60):
            while len(received) < len(steps):
                await consumer.poll_once(timeout_ms=1000)
        assert consumer.stats.dead_lettered == 0
    assert received == steps

    async with TopicReader(topics, "big-reader") as reader:
        parts = await reader.partitions([topics.topic("steps")])
        await reader.open(parts, start="beginning", until="end")
        read = [r async for batch in reader for r in batch]
    assert sorted(len(r.value or b"") for r in read)[-1] > MAX_PAYLOAD_BYTES - 128 * 1024
    assert len(read) == len(steps)


async def test_publish_validates_mappings(producer: EventProducer) -> None:
    with pytest.raises(TypeError, match="schema="):
        await producer.publish({"task_id": "t", "env": "os"})
    with pytest.raises(ValueError, match="env"):
        await producer.publish({"task_id": "t"}, schema=s.Task)
    ack = await producer.publish({"task_id": "t", "env": "os"}, schema=s.Task)
    assert ack.offset >= 0


async def test_publish_many_places_keys_like_send(producer: EventProducer) -> None:
    def steps(offset: int) -> list[s.Step]:
        return [
            s.Step(
                episode_id=f"ep-{i % 11}",
                step_index=offset + i,
                env="os",
                task_id="t",
                policy_version=0,
            )
            for i in range(200)
        ]

    one_by_one = [await producer.publish(e) for e in steps(0)]
    batched = await producer.publish_many(steps(1000))
    assert [a.partition for a in one_by_one] == [b.partition for b in batched]
    # Offsets returned per event are distinct and increase within each partition.
    per_partition: dict[int, list[int]] = {}
    for ack in batched:
        per_partition.setdefault(ack.partition, []).append(ack.offset)
    for offsets in per_partition.values():
        assert offsets == sorted(set(offsets))


async def test_group_resumes_after_handled_offsets(
    topics: Settings, producer: EventProducer
) -> None:
    first = [s.Task(task_id=f"t{i}", env="qa") for i in range(30)]
    await producer.publish_many(first)
    seen: list[str] = []

    async def handle(d: Delivery) -> None:
        seen.append(d.event.event_id)

    async with EventConsumer(["tasks"], "resume", handler=handle, settings=topics) as consumer:
        while len(seen) < 30:
            await consumer.poll_once(timeout_ms=3000)
    second = [s.Task(task_id=f"u{i}", env="qa") for i in range(5)]
    await producer.publish_many(second)
    async with EventConsumer(["tasks"], "resume", handler=handle, settings=topics) as consumer:
        for _ in range(20):
            await consumer.poll_once(timeout_ms=1000)
            if len(seen) >= 35:
                break
        await consumer.poll_once(timeout_ms=1000)  # a redelivery would show up here
    assert sorted(seen) == sorted(e.event_id for e in first + second)  # nothing twice


async def test_wait_caught_up_returns_once_the_backlog_is_handled(
    topics: Settings, producer: EventProducer
) -> None:
    backlog = [s.Task(task_id=f"b{i}", env="qa") for i in range(40)]
    await producer.publish_many(backlog)
    seen: list[str] = []

    async def handle(d: Delivery) -> None:
        seen.append(d.event.event_id)

    async with EventConsumer(
        ["tasks"], "catch-up", handler=handle, settings=topics, max_records=7
    ) as consumer:
        running = asyncio.create_task(consumer.run())
        assert await consumer.wait_caught_up(60)
        assert sorted(seen) == sorted(t.event_id for t in backlog)
        consumer.request_stop()
        await running
