"""Consumed-offset bookkeeping that survives restarts exactly.

Records finish out of order (a held-back group, a skipped stale record), so a single
committed offset per partition is not enough. Per partition we keep the *watermark* (every
offset below it is finished) and the finished offsets above it. Saved in the checkpoint,
this lets a restarted trainer resume reading at the watermark and pass over exactly the
records it already trained on or skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PartitionProgress:
    """Finished offsets of one partition."""

    watermark: int = 0
    done_above: set[int] = field(default_factory=set)

    def finish(self, offset: int) -> None:
        """Mark ``offset`` trained on or skipped; advance the watermark over a finished run."""
        if offset < self.watermark:
            return
        self.done_above.add(offset)
        while self.watermark in self.done_above:
            self.done_above.remove(self.watermark)
            self.watermark += 1

    def is_done(self, offset: int) -> bool:
        """Was ``offset`` finished already?"""
        return offset < self.watermark or offset in self.done_above


@dataclass
class OffsetLedger:
    """:class:`PartitionProgress` per partition of one topic."""

    partitions: dict[int, PartitionProgress] = field(default_factory=dict)

    def progress(self, partition: int) -> PartitionProgress:
        """The progress of ``partition`` (created at offset 0 if new)."""
        return self.partitions.setdefault(partition, PartitionProgress())

    def finish(self, partition: int, offset: int) -> None:
        """Mark one record finished."""
        self.progress(partition).finish(offset)

    def is_done(self, partition: int, offset: int) -> bool:
        """Was this record finished already?"""
        return self.progress(partition).is_done(offset)

    def to_json(self) -> dict[str, object]:
        """Serialisable snapshot (for the checkpoint)."""
        return {
            str(p): {"watermark": pp.watermark, "done_above": sorted(pp.done_above)}
            for p, pp in sorted(self.partitions.items())
        }

    @classmethod
    def from_json(cls, data: dict[str, dict[str, object]]) -> OffsetLedger:
        """Inverse of :meth:`to_json`."""
        ledger = cls()
        for key, entry in data.items():
            watermark = entry["watermark"]
            done = entry["done_above"]
            assert isinstance(watermark, int) and isinstance(done, list)
            ledger.partitions[int(key)] = PartitionProgress(watermark, {int(o) for o in done})
        return ledger
