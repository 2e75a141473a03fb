"""Encoding events to Kafka records and decoding them back, with precise errors.

Payloads are UTF-8 JSON in field order (deterministic); headers follow the contract in
:mod:`headers`. Decoding checks that the headers agree with the payload, so a consumer that
filters on headers never sees a record whose payload says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from . import headers as h
from .events import EVENT_TYPES, Event

MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
"""Largest record the codec writes or reads (the catalogue's topics allow this much)."""
RECORD_OVERHEAD_BYTES = 512
"""Room left under :data:`MAX_PAYLOAD_BYTES` for the batch and record framing Kafka adds."""

_SURELY_FITS = (MAX_PAYLOAD_BYTES - RECORD_OVERHEAD_BYTES - 4096) // 3
"""A value shorter than this fits whatever its key and headers: they copy fields of the
payload (at most twice: the key and ``sf-episode`` may both be the episode id) plus a few
fixed bytes, so only larger values have their exact size added up."""

_REGISTRY: dict[str, type[Event]] = {sid: cls for cls in EVENT_TYPES for sid in cls.schema_ids()}
_BY_SCHEMA_BYTES: dict[bytes, type[Event]] = {k.encode(): v for k, v in _REGISTRY.items()}


class DecodeError(ValueError):
    """A record could not be decoded: the message says which field and why."""


class EncodeError(ValueError):
    """An event cannot go on the wire (too large, text that is not UTF-8): says which and why."""


@dataclass(slots=True)
class EncodedRecord:
    """What goes on the wire for one event."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


def register(cls: type[Event]) -> type[Event]:
    """Make an extra event type decodable (plugins may add their own)."""
    for schema in cls.schema_ids():
        _REGISTRY[schema] = cls
        _BY_SCHEMA_BYTES[schema.encode()] = cls
    return cls


def event_type(schema: str) -> type[Event]:
    """The model for an ``sf-schema`` value; :class:`DecodeError` if unknown."""
    try:
        return _REGISTRY[schema]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise DecodeError(
            f"header 'sf-schema'={h.shown(schema)} is not a known schema ({known})"
        ) from None


def encode(event: Event) -> EncodedRecord:
    """Serialise an event to key, JSON value and contract headers; :class:`EncodeError` when
    it cannot go on the wire (over :data:`MAX_PAYLOAD_BYTES`, or text with lone surrogates)."""
    try:
        headers = [(h.SCHEMA, _schema_bytes(type(event)))]
        if (version := event.header_policy_version()) is not None:
            headers.append((h.POLICY_VERSION, b"%d" % version))
        if (episode := event.header_episode()) is not None:
            headers.append((h.EPISODE, episode.encode()))
        if (env := event.header_env()) is not None:
            headers.append((h.ENV, env.encode()))
        if event.trace_id is not None:
            headers.append((h.TRACE, event.trace_id.encode()))
        headers.append((h.PRODUCED_AT, repr(event.produced_at).encode()))
        value = event.__pydantic_serializer__.to_json(event)
        record = EncodedRecord(key=event.key().encode(), value=value, headers=headers)
    except (UnicodeEncodeError, PydanticSerializationError):
        raise EncodeError(
            f"{event.schema_id()}: field {h.shown(_unencodable_field(event))} holds text that is "
            "not valid Unicode (a lone surrogate such as '\\ud800'); replace it before publishing"
        ) from None
    if len(value) < _SURELY_FITS:
        return record
    size = record_size(record.key, record.value, record.headers)
    if size > MAX_PAYLOAD_BYTES - RECORD_OVERHEAD_BYTES:
        raise EncodeError(
            f"{event.schema_id()} event {event.key()[:64]!r} encodes to {size} bytes, over the "
            f"{MAX_PAYLOAD_BYTES - RECORD_OVERHEAD_BYTES}-byte record limit of the topics; "
            "shorten its largest field or store the blob elsewhere and send its URI"
        )
    return record


def record_size(key: bytes | None, value: bytes | None, headers: h.RawHeaders | None) -> int:
    """Bytes of a record's key, value and headers (Kafka's framing not counted)."""
    return (
        len(key or b"")
        + len(value or b"")
        + sum(len(k.encode("utf-8", "replace")) + len(v or b"") for k, v in headers or ())
    )


def _unencodable_field(event: Event) -> str:
    """Dotted path of the first text in ``event`` that UTF-8 cannot encode (error path only)."""
    stack: list[tuple[str, object]] = [("", event.model_dump())]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return path or "<payload>"
        elif isinstance(value, dict):
            stack.extend((f"{path}.{k}".lstrip("."), v) for k, v in value.items())
            stack.extend((f"{path}.<key>".lstrip("."), k) for k in value)
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}.{i}".lstrip("."), v) for i, v in enumerate(value))
    return "<payload>"


def _schema_bytes(cls: type[Event]) -> bytes:
    cached = _SCHEMA_BYTES.get(cls)
    if cached is None:
        cached = _SCHEMA_BYTES[cls] = cls.schema_id().encode()
    return cached


_SCHEMA_BYTES: dict[type[Event], bytes] = {}


def decode(value: bytes | None, raw_headers: h.RawHeaders | None) -> Event:
    """Decode and validate a record; raise :class:`DecodeError` naming the field and why.

    Records as our producers write them take a fast path (one pass over the headers, no
    intermediate objects: the consumer's header check cost more than pydantic's validation,
    ``bench/bus.py``); anything unusual falls back to the careful path, which accepts and
    rejects exactly the same records and says why."""
    fast = _fast_headers(raw_headers, value)
    if fast is not None:
        cls, version, episode, env = fast
        try:  # the validator itself: model_validate_json's own frame cost 0.4 µs a record
            event = cls.__pydantic_validator__.validate_json(value)
        except ValidationError as exc:
            raise DecodeError(describe_validation_error(cls, exc)) from None
        if (
            version == event.header_policy_version()
            and episode == (event.header_episode() or None)
            and env == (event.header_env() or None)
        ):
            return event
    return _decode_carefully(value, raw_headers)


_SLOTS = {name: i for i, name in enumerate(h.CONTRACT)}
_NOT_FAST = (ValueError, TypeError, AttributeError, UnicodeDecodeError)


def _fast_headers(
    raw_headers: h.RawHeaders | None, value: bytes | None
) -> tuple[type[Event], int | None, str | None, str | None] | None:
    """The event type and the policy version, episode and env headers of a well-formed
    record, or None for anything the careful path must look at (missing, repeated, unknown
    or malformed headers, an empty or oversized value)."""
    if not value or len(value) > MAX_PAYLOAD_BYTES:
        return None
    slots: list[bytes | None] = [None] * len(_SLOTS)
    try:
        for name, raw in raw_headers or ():
            i = _SLOTS.get(name)
            if i is not None:
                if slots[i] is not None:
                    return None
                slots[i] = raw or b""
        schema, version, episode, env, trace, produced_at = slots
        cls = _BY_SCHEMA_BYTES.get(schema)  # type: ignore[arg-type]
        if cls is None:
            return None
        if version is not None and not version.isdigit():
            return None
        if trace:
            trace.decode()
        if produced_at is not None:
            when = float(produced_at)
            if when != when or when < 0:
                return None
        return (
            cls,
            None if version is None else int(version),
            episode.decode() or None if episode is not None else None,
            env.decode() or None if env is not None else None,
        )
    except _NOT_FAST:
        return None


def _decode_carefully(value: bytes | None, raw_headers: h.RawHeaders | None) -> Event:
    try:
        hdrs = h.Headers.decode(raw_headers)
    except h.HeaderError as exc:
        raise DecodeError(str(exc)) from None
    cls = event_type(hdrs.schema)
    if value is None:
        raise DecodeError("record has no value (a tombstone); expected a JSON event")
    if len(value) > MAX_PAYLOAD_BYTES:
        raise DecodeError(f"payload is {len(value)} bytes, over the {MAX_PAYLOAD_BYTES} limit")
    try:
        event = cls.model_validate_json(value)
    except ValidationError as exc:
        raise DecodeError(describe_validation_error(cls, exc, hdrs.schema)) from None
    _check_agreement(event, hdrs)
    return event


def describe_validation_error(
    cls: type[Event], exc: ValidationError, schema: str | None = None
) -> str:
    """One line per problem: ``<schema>: field 'a.b': <why>``, naming the version the record
    claims (``schema``, its header) where one of several was decoded."""
    parts = []
    for err in exc.errors(include_url=False)[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "<payload>"
        parts.append(f"field {h.shown(loc)}: {err['msg'][:200]}")
    more = exc.error_count() - len(parts)
    tail = f" (+{more} more)" if more > 0 else ""
    return f"{schema or cls.schema_id()}: " + "; ".join(parts) + tail


def _check_agreement(event: Event, hdrs: h.Headers) -> None:
    for name, got, want in (
        (h.POLICY_VERSION, hdrs.policy_version, event.header_policy_version()),
        (h.EPISODE, hdrs.episode, event.header_episode()),
        (h.ENV, hdrs.env, event.header_env()),
    ):
        if got != (want if want != "" else None):  # an empty header reads as absent
            raise DecodeError(
                f"header {name!r}={h.shown(got)} disagrees with the payload ({h.shown(want)}); "
                "stamp headers from the event (infra producer does this)"
            )
