"""The one dead-letter path: a record that cannot be processed goes to ``sf.dlq`` as it was.

The original key, value and headers are kept, with the reason (``sf-error``), where it came
from (topic, partition, offset: -1 for an output that never reached its topic) and the
consumer group that gave up on it (``sf-origin-group``) added as headers. A record too large
to copy is kept by reference (key and value cut, the original size in ``sf-value-bytes``),
also when the dead-letter topic itself refuses the copy as too large: never a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aiokafka.errors import MessageSizeTooLargeError, RecordTooLargeError

from ..schemas import DeadLetter, codec
from . import metrics
from .producer import EventProducer

log = logging.getLogger(__name__)


class DeadLetterStats(metrics.Tally):
    """Dead letters sent (in the metrics registry), per reason and origin topic."""

    dead_lettered = metrics.Count(
        "sf_dead_letters",
        "records sent to the dead-letter topic, per reason and origin topic",
        "reason",
        "topic",
    )

    @property
    def reasons(self) -> dict[str, int]:
        """Dead letters per reason (``decode``, ``handler``...)."""
        return self.by("dead_lettered")


class DeadLetters:
    """Sends dead letters of one consumer group through ``producer``."""

    def __init__(self, producer: EventProducer, group_id: str) -> None:
        self.producer = producer
        self.group_id = group_id
        self.topic = producer.settings.topic("dlq")
        self.stats = DeadLetterStats()

    async def send(
        self,
        reason: str,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
    ) -> asyncio.Future[object]:
        """Dead-letter one record (see the module docstring); counted by the reason's first
        word. Resolves once the dead-letter topic acknowledged it."""
        self.stats.count("dead_lettered", reason=reason.split(":", 1)[0], topic=topic)
        wire = DeadLetter.wire_headers(headers, reason, topic, partition, offset, self.group_id)
        origin = (reason, topic, partition, offset, self.group_id)
        limit = codec.MAX_PAYLOAD_BYTES - codec.RECORD_OVERHEAD_BYTES
        if codec.record_size(key, value, wire) > limit:
            key, value, wire = DeadLetter.by_reference(key, value, headers, *origin)
            return await self.producer.send_raw(self.topic, key=key, value=value, headers=wire)
        whole = await self.producer.send_raw(self.topic, key=key, value=value, headers=wire)

        async def whole_or_reference() -> object:
            """The whole copy's ack; if the dead-letter topic refuses it as too large (a
            smaller max.message.bytes there), a reference's ack instead."""
            try:
                return await whole
            except (MessageSizeTooLargeError, RecordTooLargeError) as exc:
                log.warning(
                    "dead letter of %s@%s too large (%r): sent by reference", topic, offset, exc
                )
                ref = DeadLetter.by_reference(key, value, headers, *origin)
                return await (
                    await self.producer.send_raw(
                        self.topic, key=ref[0], value=ref[1], headers=ref[2]
                    )
                )

        return asyncio.ensure_future(whole_or_reference())
