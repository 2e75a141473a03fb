"""Events as the consumer hands them over (``infra.consumer.Delivery``), for tests that feed a
worker's pure function without a broker."""

from __future__ import annotations

import zlib

from safactory.infra.consumer import Delivery
from safactory.schemas import Event, codec


def deliveries(events: list[Event], start: int = 0, partitions: int = 3) -> list[Delivery]:
    """Events as the consumer hands them over, with increasing offsets per partition."""
    offsets = [start] * partitions
    out = []
    for e in events:
        p = zlib.crc32(e.key().encode()) % partitions
        record = codec.encode(e)
        out.append(Delivery(e, f"sf.{e.TOPIC}", p, offsets[p], record.key, record.headers))
        offsets[p] += 1
    return out
