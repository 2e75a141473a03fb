"""Dead letters: records that failed to decode or validate, kept with the reason.

On the wire a dead letter is the original record, byte for byte (key, value, headers),
with ``sf-error``, the origin topic, partition and offset, and ``sf-origin-group`` (the
consumer group that dead-lettered it) added to its headers. Every group that reads a bad
record dead-letters it once, so three groups on ``sf.steps`` leave three copies: the same
origin, one per ``sf-origin-group``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from . import headers as h


class DeadLetter(BaseModel):
    """A record read back from the dead-letter topic."""

    model_config = ConfigDict(frozen=True)

    error: str
    origin_topic: str
    origin_partition: int
    origin_offset: int
    origin_group: str | None = None
    """The consumer group that dead-lettered the record (None: a producer-side writer)."""
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]

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
    def from_record(
        cls, key: bytes | None, value: bytes | None, headers: h.RawHeaders | None
    ) -> DeadLetter:
        """Rebuild a dead letter from a record consumed off the dead-letter topic."""
        raw = [(k, v if v is not None else b"") for k, v in headers or ()]
        get = dict(raw).get
        return cls(
            error=get(h.ERROR, b"").decode("utf-8", errors="replace"),
            origin_topic=get(h.ORIGIN_TOPIC, b"").decode(),
            origin_partition=int(get(h.ORIGIN_PARTITION, b"-1") or -1),
            origin_offset=int(get(h.ORIGIN_OFFSET, b"-1") or -1),
            origin_group=get(h.ORIGIN_GROUP, b"").decode("utf-8", errors="replace") or None,
            key=key,
            value=value,
            headers=[(k, v) for k, v in raw if not k.startswith("sf-origin-") and k != h.ERROR],
        )
