"""Dead letters: records that failed to decode or validate, kept with the reason.

On the wire a dead letter is the original record, byte for byte (key, value, headers),
with ``sf-error``, the origin topic, partition and offset, and ``sf-origin-group`` (the
consumer group that dead-lettered it) added to its headers. Every group that reads a bad
record dead-letters it once, so three groups on ``sf.steps`` leave three copies: the same
origin, one per ``sf-origin-group``.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from . import headers as h


class DeadLetter(BaseModel):
    """A record read back from the dead-letter topic."""

    model_config = ConfigDict(frozen=True)
    PREVIEW_BYTES: ClassVar[int] = 64 * 1024
    """How much of the key and the value a dead letter kept by reference carries."""

    error: str
    origin_topic: str
    origin_partition: int
    origin_offset: int
    origin_group: str | None = None
    """The consumer group that dead-lettered the record (None: a producer-side writer)."""
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    value_bytes: int | None = None
    """Size of the original value when this dead letter holds only its start (by reference)."""

    @staticmethod
    def wire_headers(
        original: h.RawHeaders | None,
        error: str,
        topic: str,
        partition: int,
        offset: int,
        group: str | None = None,
    ) -> list[tuple[str, bytes]]:
        """Headers for the dead-letter copy of a record: the original ones plus the reason,
        where it was read and (``group``) which consumer group dead-lettered it."""
        added = {h.ERROR, h.ORIGIN_TOPIC, h.ORIGIN_PARTITION, h.ORIGIN_OFFSET, h.ORIGIN_GROUP}
        kept = [(k, v if v is not None else b"") for k, v in original or () if k not in added]
        wire = [
            *kept,
            (h.ERROR, error.encode("utf-8", errors="replace")[:4096]),
            (h.ORIGIN_TOPIC, topic.encode()),
            (h.ORIGIN_PARTITION, str(partition).encode()),
            (h.ORIGIN_OFFSET, str(offset).encode()),
        ]
        if group is not None:
            wire.append((h.ORIGIN_GROUP, group.encode()))
        return wire

    @classmethod
    def by_reference(
        cls,
        key: bytes | None,
        value: bytes | None,
        original: h.RawHeaders | None,
        error: str,
        topic: str,
        partition: int,
        offset: int,
        group: str | None = None,
    ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
        """Key, value and headers of a dead letter for a record too large to copy whole: key
        and value cut to ``PREVIEW_BYTES``, contract headers (each cut), reason, origin and
        the value's original size."""
        cut = cls.PREVIEW_BYTES
        contract = [(k, (v or b"")[:1024]) for k, v in original or () if k in h.CONTRACT][:16]
        headers = cls.wire_headers(contract, error, topic, partition, offset, group)
        headers.append((h.VALUE_BYTES, str(len(value or b"")).encode()))
        return (
            (None if key is None else key[:cut]),
            (None if value is None else value[:cut]),
            headers,
        )

    @classmethod
    def from_record(
        cls, key: bytes | None, value: bytes | None, headers: h.RawHeaders | None
    ) -> DeadLetter:
        """Rebuild a dead letter from a record consumed off the dead-letter topic."""
        raw = [(k, v if v is not None else b"") for k, v in headers or ()]
        get = dict(raw).get
        size = _number(get(h.VALUE_BYTES))
        ours = {h.ERROR, h.VALUE_BYTES}
        return cls(
            error=get(h.ERROR, b"").decode("utf-8", errors="replace"),
            origin_topic=get(h.ORIGIN_TOPIC, b"").decode("utf-8", errors="replace"),
            origin_partition=_number(get(h.ORIGIN_PARTITION)),
            origin_offset=_number(get(h.ORIGIN_OFFSET)),
            origin_group=get(h.ORIGIN_GROUP, b"").decode("utf-8", errors="replace") or None,
            key=key,
            value=value,
            headers=[(k, v) for k, v in raw if not k.startswith("sf-origin-") and k not in ours],
            value_bytes=None if size < 0 else size,
        )


def _number(raw: bytes | None) -> int:
    """An integer header; -1 when absent or not an integer (a reader never fails on one)."""
    try:
        return int(raw) if raw else -1
    except ValueError:
        return -1
