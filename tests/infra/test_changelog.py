"""Reading a changelog topic to its end: latest value per key, empty and trimmed partitions."""

from __future__ import annotations

import time

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import RecordsToDelete

from safactory.infra.changelog import STALL_S, read_latest
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import TopicSpec, admin_client, create_topics

pytestmark = pytest.mark.integration


async def test_latest_values_from_full_empty_and_trimmed_partitions(settings: Settings) -> None:
    spec = TopicSpec("state-t", "k", "test changelog", cleanup="compact,delete", partitions=3)
    await create_topics(settings, [spec])
    topic = settings.topic(spec.name)
    async with EventProducer(settings) as producer:
        writes = [
            (b"a", b"1", 0),
            (b"b", b"1", 0),
            (b"a", b"2", 0),
            (b"b", None, 0),
            (b"x", b"old", 2),
            (b"y", b"1", 2),
            (b"y", b"2", 2),
        ]
        for key, value, partition in writes:
            await (
                await producer.send_raw(
                    topic, key=key, value=value, headers=[], partition=partition
                )
            )
    admin = admin_client(settings)
    await admin.start()
    try:  # partition 2 loses its first record, as compaction or retention would drop it
        await admin.delete_records({TopicPartition(topic, 2): RecordsToDelete(1)})
    finally:
        await admin.close()
    started = time.monotonic()
    latest = await read_latest(settings, topic, [0, 1, 2])
    assert time.monotonic() - started < STALL_S  # empty partition 1 ends the read at once
    assert {p: {k: r.value for k, r in kv.items()} for p, kv in latest.items()} == {
        0: {b"a": b"2"},
        1: {},
        2: {b"y": b"2"},
    }


async def test_compacted_topics_roll_segments_so_the_cleaner_can_run(settings: Settings) -> None:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from safactory.infra.topics import COMPACTED
    from safactory.streams.assembly.processor import STATE_TOPIC

    await create_topics(settings, [STATE_TOPIC])
    admin = admin_client(settings)
    await admin.start()
    try:
        resource = ConfigResource(ConfigResourceType.TOPIC, settings.topic(STATE_TOPIC.name))
        (response,) = await admin.describe_configs([resource])
    finally:
        await admin.close()
    entries = {e[0]: e[1] for e in response.resources[0][4]}
    assert entries["cleanup.policy"] == "compact"
    assert {k: entries[k] for k in COMPACTED} == COMPACTED
