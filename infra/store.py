"""Keyed processor state in a compacted changelog topic, co-partitioned with the inputs.

The state of input partition ``p`` lives in changelog partition ``p``: whichever group member
owns the input partition finds its state there. State is two-level, ``key → item → value``
(an episode → its steps, events or markers), and every item is one changelog record whose
key is ``<key>\\0<item>`` (the one key format every processor uses) and whose value is the
item's bytes; deleting writes a tombstone. So a write costs one small record whatever the
size of the key's state, and compaction keeps the latest value of each item.

Writes are applied in memory at once and sent by the runtime only after the outputs of the
records that made them were acknowledged; input offsets commit after both
(``infra.processor``). A handler that fails has its writes rolled back (:meth:`mark`,
:meth:`rollback`), so a retried or dead-lettered record leaves no half-made state.

Restore. When partitions are assigned, :meth:`ChangelogStore.restore` reads them to the end
offsets they had at that moment (an empty or compacted partition ends the read as a full
one does) before the runtime hands out any input record of those partitions. A restore
that cannot finish (the broker died, a partition stopped answering) raises
:class:`RestoreFailed`: the worker stops and its supervisor restarts it, rather than
judging records on partial state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence

from aiokafka import TopicPartition

from .config import Settings
from .producer import EventProducer
from .reader import ReadStalled, TopicReader

log = logging.getLogger(__name__)

SEP = b"\0"
Headers = Sequence[tuple[str, bytes]]
Value = tuple[bytes, Headers]


class RestoreFailed(RuntimeError):
    """A changelog partition could not be read to its end: its state would be partial."""


def wire_key(key: str, item: str) -> bytes:
    """The changelog record key of one item (``<key>\\0<item>``)."""
    if "\0" in key:
        raise ValueError(f"state key {key[:80]!r} contains NUL, which separates key and item")
    return key.encode() + SEP + item.encode()


class PartitionState:
    """The state of one input partition: ``key → item → value``."""

    __slots__ = ("_data", "_store", "nbytes", "partition")

    def __init__(self, store: ChangelogStore, partition: int) -> None:
        self._store = store
        self.partition = partition
        self._data: dict[str, dict[str, Value]] = {}
        self.nbytes = 0
        """Bytes of values held."""

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def keys(self) -> Iterator[str]:
        """Keys held, in the order they were first written."""
        return iter(list(self._data))

    def get(self, key: str, item: str) -> bytes | None:
        """One item's value, or None."""
        found = self._data.get(key, {}).get(item)
        return None if found is None else found[0]

    def items(self, key: str) -> dict[str, bytes]:
        """Every item of ``key`` and its value (a copy)."""
        return {item: value for item, (value, _) in self._data.get(key, {}).items()}

    def entries(self, key: str) -> dict[str, Value]:
        """Every item of ``key`` with its value and headers (a copy)."""
        return dict(self._data.get(key, {}))

    def set(self, key: str, item: str, value: bytes, headers: Headers = ()) -> None:
        """Write one item (replacing any earlier value)."""
        items = self._data.setdefault(key, {})
        old = items.get(item)
        items[item] = (value, headers)
        self.nbytes += len(value) - (len(old[0]) if old else 0)
        self._store._wrote(self, key, item, old, wire_key(key, item), value, headers)

    def delete(self, key: str, item: str | None = None) -> None:
        """Delete one item, or with ``item`` None every item of ``key`` (tombstones)."""
        items = self._data.get(key)
        if not items:
            return
        for name in [item] if item is not None else list(items):
            old = items.pop(name, None)
            if old is None:
                continue
            self.nbytes -= len(old[0])
            self._store._wrote(self, key, name, old, wire_key(key, name), None, ())
        if not items:
            self._data.pop(key, None)

    def _put(self, key: str, item: str, value: Value | None) -> None:
        """Set or remove an item in memory only (restore, rollback)."""
        items = self._data.setdefault(key, {})
        old = items.pop(item, None)
        if old is not None:
            self.nbytes -= len(old[0])
        if value is not None:
            items[item] = value
            self.nbytes += len(value[0])
        elif not items:
            self._data.pop(key, None)


class ChangelogStore:
    """The keyed state of one processor (see the module docstring)."""

    def __init__(self, settings: Settings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self.parts: dict[int, PartitionState] = {}
        self._pending: list[tuple[int, bytes, bytes | None, Headers] | None] = []
        """Writes not yet sent (None: one of a partition released since)."""
        self._sent = 0
        """Writes sent before ``_pending[0]``: positions (:attr:`end`) count every write."""
        self._undo: list[tuple[PartitionState, str, str, Value | None]] = []

    def partition(self, number: int) -> PartitionState:
        """The state of input partition ``number`` (empty if never restored or written)."""
        part = self.parts.get(number)
        if part is None:
            part = self.parts[number] = PartitionState(self, number)
        return part

    @property
    def nbytes(self) -> int:
        """Bytes of values held over all partitions."""
        return sum(p.nbytes for p in self.parts.values())

    # ------------------------------------------------------------------ writes

    def _wrote(
        self,
        part: PartitionState,
        key: str,
        item: str,
        old: Value | None,
        wire: bytes,
        value: bytes | None,
        headers: Headers,
    ) -> None:
        self._undo.append((part, key, item, old))
        self._pending.append((part.partition, wire, value, headers))

    @property
    def end(self) -> int:
        """The position after the latest write (every write ever made counts one)."""
        return self._sent + len(self._pending)

    def mark(self) -> int:
        """A point to roll back to (before a handler runs)."""
        self._undo.clear()
        return self.end

    def rollback(self, mark: int) -> None:
        """Undo every write since ``mark`` (the handler failed)."""
        for part, key, item, old in reversed(self._undo):
            part._put(key, item, old)
        self._undo.clear()
        del self._pending[max(0, mark - self._sent) :]

    @property
    def dirty(self) -> bool:
        """Whether writes wait to be sent."""
        return any(w is not None for w in self._pending)

    async def flush(
        self, producer: EventProducer, upto: int | None = None
    ) -> list[asyncio.Future[object]]:
        """Send the writes made so far (or those before position ``upto``: a handler may be
        writing the next batch's meanwhile) to the changelog; the acks to wait for."""
        n = len(self._pending) if upto is None else max(0, upto - self._sent)
        writes = self._pending[:n]
        del self._pending[:n]
        self._sent += len(writes)
        return [
            await producer.send_raw(
                self.topic, key=w[1], value=w[2], headers=list(w[3]), partition=w[0]
            )
            for w in writes
            if w is not None
        ]

    # ------------------------------------------------------------------ assignment

    async def restore(self, partitions: Iterable[int]) -> dict[int, int]:
        """Read ``partitions`` of the changelog to their end into memory (replacing what
        was held for them); records restored per partition. :class:`RestoreFailed` if a
        partition cannot be read to its end."""
        numbers = sorted(set(partitions))
        for number in numbers:
            self.parts[number] = PartitionState(self, number)
        counts = dict.fromkeys(numbers, 0)
        if not numbers:
            return counts
        unreadable = 0
        try:
            async with TopicReader(self.settings, f"restore {self.topic}") as reader:
                await reader.open([TopicPartition(self.topic, p) for p in numbers], until="end")
                async for records in reader:
                    for record in records:
                        key, sep, item = (record.key or b"").partition(SEP)
                        if not sep:
                            unreadable += 1
                            continue
                        part = self.parts[record.partition]
                        value = (
                            None if record.value is None else (record.value, tuple(record.headers))
                        )
                        part._put(
                            key.decode(errors="replace"), item.decode(errors="replace"), value
                        )
                        counts[record.partition] += 1
        except ReadStalled as exc:
            raise RestoreFailed(f"state restore of {self.topic} cannot finish: {exc}") from exc
        except Exception as exc:
            raise RestoreFailed(f"state restore of {self.topic} failed: {exc!r}") from exc
        if unreadable:
            log.warning(
                "%s: %d records without a <key>\\0<item> key passed over", self.topic, unreadable
            )
        return counts

    def release(self, partitions: Iterable[int]) -> None:
        """Forget the state of partitions another member owns now (it is durable: every
        write was acknowledged before the offsets behind it were committed)."""
        for number in partitions:
            self.parts.pop(number, None)
        kept = set(self.parts)  # positions stay: a handler in flight may hold a mark
        self._pending = [w if w is not None and w[0] in kept else None for w in self._pending]
