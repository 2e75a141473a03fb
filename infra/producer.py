"""The event producer: validates, encodes and stamps contract headers; idempotent, acks=all.

Records go through aiokafka's own ``send``: its accumulator batches per partition (for
``linger_ms``, and for as long as the partition's previous batch is in flight), and every
event gets one future that resolves with its own offset. ``bench/producer_compare.py``
measured this against batches built by hand and kept it (docs/DECISIONS.md).

Order within a partition: with idempotence every batch carries a sequence number, so when
a batch fails for good (the broker refused it, say as too large for the topic) the broker
refuses every later batch of that partition too (``OutOfOrderSequenceNumber``) instead of
writing them out of order. The producer then starts a fresh client (a new producer id)
before the next send, so sends made after the failure was reported go through again.
"""

from __future__ import annotations

import asyncio
import functools
import random
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from aiokafka.structs import RecordMetadata

from ..schemas import Event, codec
from .config import Settings, get_settings


class EventProducer:
    """Publishes events to their catalogue topics.

    Use as ``async with EventProducer() as producer: await producer.publish(step)``.
    ``send`` enqueues and returns a future (for throughput); ``publish`` waits for the ack.
    """

    def __init__(self, settings: Settings | None = None, **kafka_options: Any) -> None:
        self.settings = settings or get_settings()
        self._options: dict[str, Any] = {
            "bootstrap_servers": self.settings.kafka_bootstrap,
            "client_id": f"{self.settings.client_id}-producer",
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 0,  # batches still form while a partition's last one is in flight
            "max_batch_size": 256 * 1024,
            "max_request_size": codec.MAX_PAYLOAD_BYTES + 64 * 1024,
            "compression_type": None,
            "partitioner": KeyHashCache(),
        }
        self._options.update(kafka_options)
        self._producer: AIOKafkaProducer | None = None
        self._watch: Any = None
        self._failed = False  # a batch failed: renew the client before the next send
        self._renewal: asyncio.Future[None] | None = None
        self.renewals = 0
        """How many times a failed batch made the producer start a fresh client."""

    async def start(self) -> None:
        """Connect to the cluster."""
        await self._connect()

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        if self._renewal is not None:
            await asyncio.gather(self._renewal, return_exceptions=True)
        producer, self._producer = self._producer, None
        if producer is not None:
            await producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def topic_of(self, event: Event) -> str:
        """The full topic name an event goes to by default."""
        return self.settings.topic(event.TOPIC)

    async def send(
        self,
        event: Event | Mapping[str, Any],
        *,
        schema: type[Event] | None = None,
        topic: str | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Validate (dicts need ``schema``), encode and enqueue; the future resolves on ack.

        Raises :class:`~safactory.schemas.EncodeError` at once for an event that cannot go
        on the wire."""
        event = _as_event(event, schema)
        record = codec.encode(event)
        return await self._send(
            topic or self.topic_of(event), record.key, record.value, record.headers
        )

    async def publish(
        self,
        event: Event | Mapping[str, Any],
        *,
        schema: type[Event] | None = None,
        topic: str | None = None,
    ) -> RecordMetadata:
        """Send one event and wait until the cluster acknowledged it (acks=all)."""
        return await (await self.send(event, schema=schema, topic=topic))

    async def publish_many(
        self, events: Iterable[Event], *, topic: str | None = None
    ) -> list[RecordMetadata]:
        """Send many events and wait for every ack; one RecordMetadata per event, in order."""
        futures = [await self.send(e, topic=topic) for e in events]
        return list(await asyncio.gather(*futures))

    async def send_raw(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Enqueue bytes as they are (dead letters: the original record, unchanged); to
        ``partition`` when given, else where the key places them."""
        return await self._send(topic, key, value, headers, partition)

    async def flush(self) -> None:
        """Wait until everything sent so far is acknowledged (or failed)."""
        if self._renewal is not None:
            await asyncio.gather(self._renewal, return_exceptions=True)
        if self._producer is not None:
            await self._producer.flush()

    # ------------------------------------------------------------------ internals

    async def _send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        if self._failed:
            await self._renew()
        if self._producer is None:
            raise RuntimeError("EventProducer is not started: use 'async with EventProducer()'")
        future = await self._producer.send(
            topic, value, key=key, partition=partition, headers=headers
        )
        future.add_done_callback(self._watch)
        return future

    async def _connect(self) -> None:
        producer = AIOKafkaProducer(**self._options)
        await producer.start()
        self._producer, self._failed = producer, False
        self._watch = functools.partial(self._on_done, producer)

    def _on_done(self, producer: AIOKafkaProducer, future: asyncio.Future[RecordMetadata]) -> None:
        """A failed record of the current client: its partition's sequence now has a gap
        the broker will not accept, so the next send starts a fresh client."""
        if producer is self._producer and not future.cancelled() and future.exception():
            self._failed = True

    async def _renew(self) -> None:
        """Drain the old client (later batches of a failed partition fail with it, other
        partitions' batches are acknowledged, so no partition is reordered), then connect a
        new one; concurrent sends wait for the same renewal."""
        if self._renewal is None:
            self._renewal = asyncio.ensure_future(self._replace_client())
        renewal = self._renewal
        try:
            await asyncio.shield(renewal)
        finally:
            if self._renewal is renewal and renewal.done():
                self._renewal = None

    async def _replace_client(self) -> None:
        old, self._producer = self._producer, None
        if old is not None:
            await old.stop()
            self.renewals += 1
        await self._connect()


async def publish_all(settings: Settings, events: Iterable[Event]) -> int:
    """Publish ``events`` with a producer of their own (a command's one batch) and wait for
    every ack; how many were published."""
    async with EventProducer(settings) as producer:
        return len(await producer.publish_many(events))


def _as_event(event: Event | Mapping[str, Any], schema: type[Event] | None) -> Event:
    if isinstance(event, Event):
        return event
    if schema is None:
        raise TypeError("publishing a mapping needs schema=<Event subclass> to validate it")
    return schema.model_validate(event)


class KeyHashCache:
    """aiokafka's default partitioner (the Java client's murmur2 of the key), with each key's
    hash remembered: the hash is pure Python (about 5 µs a key), and a worker sends many
    records under the same few keys (an episode's verdicts, its context)."""

    def __init__(self, size: int = 65_536) -> None:
        self._size = size
        self._hashes: dict[bytes, int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return random.choice(available or all_partitions)
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= self._size:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[hashed % len(all_partitions)]
