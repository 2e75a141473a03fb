"""Every event type round-trips through the real broker with its headers intact."""

from __future__ import annotations

import pytest

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer

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


async def test_publish_validates_mappings(producer: EventProducer) -> None:
    with pytest.raises(TypeError, match="schema="):
        await producer.publish({"task_id": "t", "env": "os"})
    with pytest.raises(ValueError, match="env"):
        await producer.publish({"task_id": "t"}, schema=s.Task)
    ack = await producer.publish({"task_id": "t", "env": "os"}, schema=s.Task)
    assert ack.offset >= 0
