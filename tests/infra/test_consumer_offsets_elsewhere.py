"""Consumer hooks for an owner like the trainer: screen records before decoding, keep the
offsets outside the group and seek to them on assignment."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition
from topic_records import committed

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, Step, codec
from safactory.schemas import headers as h

pytestmark = pytest.mark.integration


def _step(n: int) -> Step:
    return Step(
        episode_id="e",
        step_index=n,
        env="t",
        task_id="t",
        policy_version=n,
        observation="o",
        action=Action(text="a"),
    )


async def test_screened_records_are_not_decoded_and_offsets_stay_out_of_the_group(
    topics: Settings, producer: EventProducer
) -> None:
    topic = topics.topic("steps")
    for n in range(6):  # one episode: one partition, offsets 0..5
        await producer.publish(_step(n))
    record = codec.encode(_step(6))
    await (
        await producer.send_raw(topic, key=record.key, value=b"not json", headers=record.headers)
    )
    stale = [(h.SCHEMA, b"step/1"), (h.POLICY_VERSION, b"0")]
    await (await producer.send_raw(topic, key=record.key, value=b"not json either", headers=stale))
    stored: dict[TopicPartition, int] = {}
    seen: list[int] = []

    async def handle(batch: list[Delivery]) -> None:
        seen.extend(d.event.step_index for d in batch if isinstance(d.event, Step))

    def screen(rec: object) -> bool:  # headers only: version 0 is passed over
        return h.header_value(rec.headers, h.POLICY_VERSION) != "0"  # type: ignore[attr-defined]

    group = topics.group("offsets-elsewhere")
    consumer = EventConsumer(
        ["steps"],
        group,
        batch_handler=handle,
        settings=topics,
        screen=screen,
        store_offsets=stored.update,
    )
    async with consumer:
        for _ in range(40):
            await consumer.poll_once(timeout_ms=250)
            if sum(stored.values()) >= 8:
                break
    tp = next(iter(stored))
    assert stored == {tp: 8}  # past the dead letter (offset 6) and the screened record (7)
    assert sorted(seen) == [1, 2, 3, 4, 5]
    assert consumer.stats.screened == 2 and consumer.stats.dead_lettered == 1
    assert consumer.stats.reasons == {"decode": 1}
    assert tp not in await committed(topics, group)  # the group was never told

    async def from_stored(assigned: set[TopicPartition]) -> None:
        for part in assigned:
            consumer.seek(part, 3 if part == tp else 0)

    seen.clear()
    consumer = EventConsumer(
        ["steps"],
        group,
        batch_handler=handle,
        settings=topics,
        store_offsets=stored.update,
        on_assigned=from_stored,
    )
    async with consumer:
        for _ in range(40):
            await consumer.poll_once(timeout_ms=250)
            if len(seen) >= 3:
                break
    assert sorted(seen) == [3, 4, 5]  # resumed at the stored offset, not the group's start
