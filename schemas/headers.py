"""The header contract every Safactory record carries (DESIGN.md, "Headers").

Consumers route and filter on these without decoding payloads; the trainer enforces
staleness from ``sf-policy-version`` alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SCHEMA = "sf-schema"
POLICY_VERSION = "sf-policy-version"
EPISODE = "sf-episode"
ENV = "sf-env"
TRACE = "sf-trace"
PRODUCED_AT = "sf-produced-at"

# Dead-letter headers, added to the original record's headers.
ERROR = "sf-error"
ORIGIN_TOPIC = "sf-origin-topic"
ORIGIN_PARTITION = "sf-origin-partition"
ORIGIN_OFFSET = "sf-origin-offset"
VALUE_BYTES = "sf-value-bytes"
"""On a dead letter kept by reference: the original value's size (the value is cut)."""
ORIGIN_GROUP = "sf-origin-group"
"""The consumer group that read the record there and dead-lettered it: each group reading a
topic dead-letters its own copy of a bad record, and this says whose copy it is."""

REPLAY = "sf-replay"
"""On verdicts and alerts a replay re-judged: the replay's id (originals never carry it).
Live folds (the assembler) pass such records over; replay readers diff them."""

CONTRACT = (SCHEMA, POLICY_VERSION, EPISODE, ENV, TRACE, PRODUCED_AT)

RawHeaders = Sequence[tuple[str, bytes]]


class HeaderError(ValueError):
    """A record's headers break the contract; the message names the header and the fix."""


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: error messages stay one short line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}…({len(text)} chars)"


@dataclass(slots=True)
class Headers:
    """Decoded contract headers of one record. Absent optional headers are ``None``."""

    schema: str
    policy_version: int | None = None
    episode: str | None = None
    env: str | None = None
    trace: str | None = None
    produced_at: float | None = None

    @classmethod
    def decode(cls, raw: Iterable[tuple[str, bytes | None]] | None) -> Headers:
        """Parse and check contract headers; raise :class:`HeaderError` on any violation."""
        values: dict[str, bytes] = {}
        for name, value in raw or ():
            if name in _CONTRACT_SET:
                if name in values:
                    raise HeaderError(f"header {shown(name)} appears more than once; send it once")
                values[name] = value or b""
        schema = _text(values, SCHEMA)
        if not schema:
            raise HeaderError(f"header {SCHEMA!r} is missing; producers must stamp e.g. 'step/1'")
        name, sep, version = schema.partition("/")
        if not name or not sep or not version.isdigit():
            raise HeaderError(
                f"header {SCHEMA!r}={shown(schema)} is not of the form '<type>/<int>'"
            )
        return cls(
            schema,
            _int_header(values, POLICY_VERSION),
            _text(values, EPISODE) or None,
            _text(values, ENV) or None,
            _text(values, TRACE) or None,
            _float_header(values, PRODUCED_AT),
        )


_CONTRACT_SET = frozenset(CONTRACT)


def _text(values: dict[str, bytes], name: str) -> str | None:
    raw = values.get(name)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HeaderError(f"header {name!r} is not valid UTF-8: {exc}") from None


def _int_header(values: dict[str, bytes], name: str) -> int | None:
    raw = values.get(name)
    if raw is None:
        return None
    try:
        number = int(raw)
    except ValueError:
        raise HeaderError(f"header {name!r}={raw[:40]!r} is not an integer") from None
    if number < 0:
        raise HeaderError(f"header {name!r}={shown(number)} is negative; versions start at 0")
    return number


def _float_header(values: dict[str, bytes], name: str) -> float | None:
    raw = values.get(name)
    if raw is None:
        return None
    try:
        number = float(raw)
    except ValueError:
        raise HeaderError(f"header {name!r}={raw[:40]!r} is not a number (unix seconds)") from None
    if number != number or number < 0:
        raise HeaderError(f"header {name!r}={raw[:40]!r} is not a valid unix time")
    return number


def header_value(raw: Iterable[tuple[str, bytes | None]] | None, name: str) -> str | None:
    """Read one header as text without decoding the rest (fast routing and filtering)."""
    for key, value in raw or ():
        if key == name:
            return (value or b"").decode("utf-8", errors="replace")
    return None
