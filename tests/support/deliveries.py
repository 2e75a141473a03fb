"""Events as the consumer hands them over (``infra.consumer.Delivery``), for tests that feed a
worker's pure function without a broker."""

from __future__ import annotations

import zlib
from pathlib import Path

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


def stored_as_the_sink(path: Path, events: list[Event]) -> list[Event]:
    """``events`` and the trajectories the assembler folds from them, written to a LanceDB
    at ``path`` as the sink writes them; returns what was written."""
    from safactory.sinks.lance import LanceSink
    from safactory.streams.assembly import TrajectoryAssembler

    assembler = TrajectoryAssembler()
    written = [*events, *(t for e in events for t in assembler.apply(e, 2000.0))]
    LanceSink(path).write_batch(deliveries(written))
    return written
