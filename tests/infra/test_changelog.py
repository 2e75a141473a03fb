"""Restoring keyed state from its changelog: latest value per item, empty and trimmed
partitions; writes rolled back, flushed and read back."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import RecordsToDelete

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.reader import STALL_S
from safactory.infra.store import ChangelogStore
from safactory.infra.topics import TopicSpec, admin_client, create_topics

pytestmark = pytest.mark.integration


async def test_latest_values_from_full_empty_and_trimmed_partitions(settings: Settings) -> None:
    spec = TopicSpec("state-t", "k", "test changelog", cleanup="compact,delete", partitions=3)
    await create_topics(settings, [spec])
    topic = settings.topic(spec.name)
    async with EventProducer(settings) as producer:
        writes = [
            (b"k\0a", b"1", 0),
            (b"k\0b", b"1", 0),
            (b"k\0a", b"2", 0),
            (b"k\0b", None, 0),
            (b"k\0x", b"old", 2),
            (b"j\0y", b"1", 2),
            (b"j\0y", b"2", 2),
            (b"no separator", b"?", 2),
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
    store = ChangelogStore(settings, topic)
    started = time.monotonic()
    counts = await store.restore([0, 1, 2])
    assert time.monotonic() - started < STALL_S  # empty partition 1 ends the read at once
    held = {p: {k: part.items(k) for k in part.keys()} for p, part in store.parts.items()}
    assert held == {0: {"k": {"a": b"2"}}, 1: {}, 2: {"j": {"y": b"2"}}}
    assert counts == {0: 4, 1: 0, 2: 2}  # records applied (the keyless one passed over)
    assert store.partition(0).nbytes == 1 and not store.dirty


async def test_writes_roll_back_and_flush_to_their_partition(settings: Settings) -> None:
    spec = TopicSpec("state-w", "k", "test changelog", cleanup="compact", partitions=3)
    await create_topics(settings, [spec])
    store = ChangelogStore(settings, settings.topic(spec.name))
    part = store.partition(2)
    part.set("ep", "s1", b"one")
    mark = store.mark()
    part.set("ep", "s1", b"changed")
    part.set("ep", "s2", b"two")
    part.delete("ep", "s1")
    store.rollback(mark)  # a handler failed after these writes: as if never made
    assert part.items("ep") == {"s1": b"one"} and part.nbytes == 3
    async with EventProducer(settings) as producer:
        await asyncio.gather(*await store.flush(producer))
    again = ChangelogStore(settings, settings.topic(spec.name))
    await again.restore([0, 1, 2])
    assert again.partition(2).items("ep") == {"s1": b"one"}
    assert list(again.partition(0).keys()) == list(again.partition(1).keys()) == []
    part.delete("ep")
    async with EventProducer(settings) as producer:
        await asyncio.gather(*await store.flush(producer))
    third = ChangelogStore(settings, settings.topic(spec.name))
    await third.restore([2])
    assert list(third.partition(2).keys()) == []


async def test_a_batch_flushes_its_own_writes_while_the_next_batch_writes(
    settings: Settings,
) -> None:
    """The runtime settles one batch while the next is handled: the flush sends only the
    writes before the settled batch's end; the next batch's marks, rollbacks and a release
    of a partition meanwhile keep their places."""
    spec = TopicSpec("state-p", "k", "test changelog", cleanup="compact", partitions=3)
    await create_topics(settings, [spec])
    store = ChangelogStore(settings, settings.topic(spec.name))
    store.partition(0).set("ep", "first", b"1")
    store.partition(1).set("other", "first", b"1")
    settled = store.end  # the first batch ends here
    mark = store.mark()  # the next batch's handler starts
    store.partition(0).set("ep", "second", b"2")
    store.release([1])  # a rebalance took partition 1 meanwhile
    async with EventProducer(settings) as producer:
        sent = await store.flush(producer, settled)
        await asyncio.gather(*sent)
        assert len(sent) == 1  # partition 0's first write; partition 1's was released
        store.partition(0).set("ep", "failed", b"x")
        store.rollback(mark)  # the next batch's handler failed: its writes undone
        assert store.partition(0).items("ep") == {"first": b"1"} and not store.dirty
        store.partition(0).set("ep", "retried", b"3")
        await asyncio.gather(*await store.flush(producer))
    again = ChangelogStore(settings, settings.topic(spec.name))
    await again.restore([0, 1])
    assert again.partition(0).items("ep") == {"first": b"1", "retried": b"3"}
    assert list(again.partition(1).keys()) == []


async def test_compacted_topics_roll_segments_so_the_cleaner_can_run(settings: Settings) -> None:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    from safactory.infra.topics import COMPACTED
    from safactory.streams.assembly.worker import STATE_TOPIC

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
