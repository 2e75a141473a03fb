"""Oversized records have a defined path: an event too large for the topics is refused at
encode (test_fuzz_codec); an incoming record too large to copy whole to the dead-letter topic
is dead-lettered by reference (key and value cut, original size and origin in headers) and
the worker carries on."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import pytest
from topic_records import everything

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.infra.topics import CATALOGUE, create_topics
from safactory.schemas import codec
from safactory.schemas import headers as h

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


async def _dead_letters_after_consuming(
    settings: Settings, value: bytes, n_good: int = 3
) -> tuple[EventConsumer, list[s.DeadLetter], list[Delivery]]:
    """Publish ``value`` as a step record that cannot decode, then ``n_good`` good steps; run a
    consumer over them and read back the dead-letter topic."""
    good = [
        s.Step(episode_id="ep", step_index=i, env="os", task_id="t", policy_version=0)
        for i in range(n_good)
    ]
    handled: list[Delivery] = []

    async def handler(delivery: Delivery) -> None:
        handled.append(delivery)

    async with EventProducer(settings) as producer:
        headers = s.encode(good[0]).headers
        await (
            await producer.send_raw(
                settings.topic("steps"), key=b"ep", value=value, headers=headers
            )
        )
        await producer.publish_many(good)
        consumer = EventConsumer(
            ["steps"],
            f"g-{uuid.uuid4().hex[:6]}",
            handler=handler,
            settings=settings,
            dlq_producer=producer,
        )
        await consumer.start()
        try:
            async with asyncio.timeout(60):
                while consumer.stats.received < 1 + n_good:
                    await consumer.poll_once(timeout_ms=1000)
        finally:
            await consumer.stop()
    letters = [
        s.DeadLetter.from_record(r.key, r.value, r.headers)
        for r in await everything(settings, settings.topic("dlq"))
    ]
    return consumer, letters, handled


async def test_a_record_the_dead_letter_topic_cannot_hold_is_dead_lettered_by_reference(
    settings: Settings,
) -> None:
    # A cluster whose dead-letter topic holds less than the records it must take (made by
    # hand, or auto-created with a broker default of 1 MiB).
    small = [
        dataclasses.replace(t, max_message_bytes=MIB) if t.name == "dlq" else t for t in CATALOGUE
    ]
    await create_topics(settings, small)
    value = b"{" + b"x" * (2 * MIB)  # not JSON: it must be dead-lettered
    consumer, letters, handled = await _dead_letters_after_consuming(settings, value)
    assert [d.event.step_index for d in handled] == [0, 1, 2]  # the worker carried on
    assert consumer.stats.dead_lettered == 1
    [letter] = letters
    assert letter.error.startswith(f"decode: {s.Step.schema_id()}: field '<payload>': Invalid JSON")
    assert (letter.origin_topic, letter.origin_offset) == (settings.topic("steps"), 0)
    assert letter.value_bytes == len(value)
    assert letter.value == value[: s.DeadLetter.PREVIEW_BYTES]
    assert dict(letter.headers)[h.SCHEMA] == s.Step.schema_id().encode()


async def test_a_record_near_the_topic_limit_is_dead_lettered_with_its_reason(
    topics: Settings,
) -> None:
    value = b"{" + b"x" * (codec.MAX_PAYLOAD_BYTES - 640)  # fits the steps topic
    consumer, letters, handled = await _dead_letters_after_consuming(topics, value)
    assert len(handled) == 3 and consumer.stats.dead_lettered == 1
    [letter] = letters
    assert letter.error.startswith("decode: ")
    assert letter.origin_offset == 0
    # the whole copy plus the reason would pass the catalogue's 8 MiB: it goes by reference
    assert letter.value_bytes == len(value)
    assert letter.value == value[: s.DeadLetter.PREVIEW_BYTES]


async def test_a_small_bad_record_is_still_copied_whole(topics: Settings) -> None:
    value = b"not json"
    _, [letter], _ = await _dead_letters_after_consuming(topics, value, n_good=1)
    assert letter.value == value and letter.value_bytes is None
