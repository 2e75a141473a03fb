"""The event producer: validates, encodes and stamps contract headers; idempotent, acks=all.

Records are appended to one open record batch per partition (aiokafka's C batch builder) and
a batch is handed to the client when it is full or has lingered ``linger_ms``; batches of one
partition are handed over strictly in order. This keeps the per-event cost well below
aiokafka's per-message ``send`` while keeping its guarantees: idempotence, ``acks=all``,
per-key order, and one future per event that resolves with that event's own offset.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.structs import RecordMetadata

from ..schemas import Event, codec
from .config import Settings, get_settings

PARTITIONS_TTL_S = 30.0
"""How long a topic's partition list is trusted before it is asked for again."""


@dataclass
class _OpenBatch:
    builder: BatchBuilder
    waiters: list[asyncio.Future[RecordMetadata]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class EventProducer:
    """Publishes events to their catalogue topics.

    Use as ``async with EventProducer() as producer: await producer.publish(step)``.
    ``send`` enqueues and returns a future (for throughput); ``publish`` waits for the ack.
    """

    def __init__(self, settings: Settings | None = None, **kafka_options: Any) -> None:
        self.settings = settings or get_settings()
        self._linger_s = float(kafka_options.pop("linger_ms", 5)) / 1000
        options: dict[str, Any] = {
            "bootstrap_servers": self.settings.kafka_bootstrap,
            "client_id": f"{self.settings.client_id}-producer",
            "acks": "all",
            "enable_idempotence": True,
            "linger_ms": 0,  # batches arrive complete; lingering happens here
            "max_batch_size": 256 * 1024,
            "max_request_size": codec.MAX_PAYLOAD_BYTES + 64 * 1024,
            "compression_type": None,
        }
        options.update(kafka_options)
        self._producer = AIOKafkaProducer(**options)
        self._partitions: dict[str, tuple[float, list[int]]] = {}
        self._placement: dict[tuple[str, bytes], int] = {}
        self._open: dict[tuple[str, int], _OpenBatch] = {}
        self._handover: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._round_robin = itertools.count()

    async def start(self) -> None:
        """Connect to the cluster."""
        await self._producer.start()

    async def stop(self) -> None:
        """Flush what is pending and disconnect."""
        await self.flush()
        await self._producer.stop()

    async def __aenter__(self) -> EventProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def topic_of(self, event: Event) -> str:
        """The full topic name an event goes to by default."""
        return self.settings.topic(event.TOPIC)

    async def send(
        self, event: Event | Mapping[str, Any], *, schema: type[Event] | None = None,
        topic: str | None = None,
    ) -> asyncio.Future[RecordMetadata]:  # fmt: skip
        """Validate (dicts need ``schema``), encode and enqueue; the future resolves on ack."""
        event = _as_event(event, schema)
        record = codec.encode(event)
        return await self._enqueue(
            topic or self.topic_of(event), record.key, record.value, record.headers
        )

    async def publish(
        self, event: Event | Mapping[str, Any], *, schema: type[Event] | None = None,
        topic: str | None = None,
    ) -> RecordMetadata:  # fmt: skip
        """Send one event and wait until the cluster acknowledged it (acks=all)."""
        future = await self.send(event, schema=schema, topic=topic)
        self._hand_over_now()
        return await future

    async def publish_many(
        self, events: Iterable[Event], *, topic: str | None = None
    ) -> list[RecordMetadata]:
        """Send many events and wait for every ack; one RecordMetadata per event, in order."""
        futures = [await self.send(e, topic=topic) for e in events]
        self._hand_over_now()
        return list(await asyncio.gather(*futures))

    async def send_raw(
        self, topic: str, *, key: bytes | None, value: bytes | None,
        headers: list[tuple[str, bytes]], partition: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:  # fmt: skip
        """Enqueue bytes as they are (dead letters: the original record, unchanged); to
        ``partition`` when given, else where the key places them."""
        return await self._enqueue(topic, key, value, headers, partition)

    async def flush(self) -> None:
        """Hand every open batch over and wait until all of them are acknowledged."""
        self._hand_over_now()
        tails = list(self._handover.values())
        if tails:
            await asyncio.gather(*tails, return_exceptions=True)
        await self._producer.flush()

    # ------------------------------------------------------------------ batching

    async def _enqueue(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        partition: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        if partition is None:
            partition = await self._partition_of(topic, key)
        tp = (topic, partition)
        batch = self._open.get(tp)
        if batch is None:
            batch = self._open[tp] = self._new_batch(tp)
        if batch.builder.append(timestamp=None, key=key, value=value, headers=headers) is None:
            self._hand_over(tp)
            batch = self._open[tp] = self._new_batch(tp)
            if batch.builder.append(timestamp=None, key=key, value=value, headers=headers) is None:
                raise ValueError(f"record of {len(value or b'')} bytes exceeds max_batch_size")
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        batch.waiters.append(future)
        return future

    def _new_batch(self, tp: tuple[str, int]) -> _OpenBatch:
        batch = _OpenBatch(self._producer.create_batch())
        batch.timer = asyncio.get_running_loop().call_later(self._linger_s, self._hand_over, tp)
        return batch

    def _hand_over_now(self) -> None:
        for tp in list(self._open):
            self._hand_over(tp)

    def _hand_over(self, tp: tuple[str, int]) -> None:
        """Close the open batch of ``tp`` and chain its sending after the previous one's."""
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
            sent = await self._producer.send_batch(batch.builder, tp[0], partition=tp[1])
            first = await sent
        except Exception as exc:  # every event of the batch learns why
            for waiter in batch.waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for i, waiter in enumerate(batch.waiters):
            if not waiter.done():
                waiter.set_result(first._replace(offset=first.offset + i))

    async def _partition_of(self, topic: str, key: bytes | None) -> int:
        """The partition aiokafka's default partitioner (murmur2, as Java's) would choose."""
        known = self._partitions.get(topic)
        if known is None or time.monotonic() - known[0] > PARTITIONS_TTL_S:
            partitions = sorted(await self._producer.partitions_for(topic))
            if known is None or known[1] != partitions:
                self._placement = {k: v for k, v in self._placement.items() if k[0] != topic}
            known = self._partitions[topic] = (time.monotonic(), partitions)
        partitions = known[1]
        if key is None:
            return partitions[next(self._round_robin) % len(partitions)]
        placed = self._placement.get((topic, key))
        if placed is None:
            if len(self._placement) > 100_000:
                self._placement.clear()
            placed = self._placement[(topic, key)] = partitions[
                (murmur2(key) & 0x7FFFFFFF) % len(partitions)
            ]
        return placed


def _as_event(event: Event | Mapping[str, Any], schema: type[Event] | None) -> Event:
    if isinstance(event, Event):
        return event
    if schema is None:
        raise TypeError("publishing a mapping needs schema=<Event subclass> to validate it")
    return schema.model_validate(event)
