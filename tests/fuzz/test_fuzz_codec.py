"""Fuzz the event codec: any record decodes or raises DecodeError (one line, nothing else);
every valid event survives encode → decode unchanged; what cannot go on the wire is refused
at encode with EncodeError naming the field or the size."""

from __future__ import annotations

import json

import pytest
from fuzz_strategies import events, fuzz, json_values, one_line, raw_headers
from hypothesis import given
from hypothesis import strategies as st

from safactory import schemas as s
from safactory.schemas import codec


def _decodes_or_refuses(value: bytes | None, hdrs: object) -> s.Event | None:
    try:
        return s.decode(value, hdrs)  # type: ignore[arg-type]
    except s.DecodeError as exc:
        assert one_line(str(exc), limit=2000), str(exc)
        return None


@fuzz()
@given(events)
def test_every_valid_event_round_trips(event: s.Event) -> None:
    record = s.encode(event)
    decoded = s.decode(record.value, record.headers)
    again = s.encode(decoded)
    assert (again.key, again.value, again.headers) == (record.key, record.value, record.headers)
    if b"NaN" not in record.value:  # NaN never equals itself; the bytes above compare it
        assert decoded == event


@fuzz()
@given(st.none() | st.binary(max_size=200), raw_headers)
def test_any_bytes_and_headers_decode_or_raise_decode_error(
    value: bytes | None, hdrs: list[tuple[str, bytes | None]] | None
) -> None:
    _decodes_or_refuses(value, hdrs)


@st.composite
def mutated_records(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, bytes]]]:
    """A valid event's record with its JSON, its bytes or its headers changed."""
    record = s.encode(draw(events))
    value, hdrs = record.value, list(record.headers)
    kind = draw(st.sampled_from(["field", "drop", "add", "bytes", "cut", "header"]))
    if kind in ("field", "drop", "add"):
        payload = json.loads(value)
        name = draw(st.sampled_from(sorted(payload)))
        if kind == "field":
            payload[name] = draw(json_values)
        elif kind == "drop":
            del payload[name]
        else:
            payload[draw(st.text(max_size=10))] = draw(json_values)
        value = json.dumps(payload).encode()
    elif kind == "bytes":
        at = draw(st.integers(0, len(value) - 1))
        value = value[:at] + draw(st.binary(min_size=1, max_size=4)) + value[at + 1 :]
    elif kind == "cut":
        value = value[: draw(st.integers(0, len(value) - 1))]
    else:
        at = draw(st.integers(0, len(hdrs) - 1))
        hdrs[at] = (hdrs[at][0], draw(st.binary(max_size=12)))
    return value, hdrs


@fuzz()
@given(mutated_records())
def test_mutated_records_decode_or_raise_decode_error(
    record: tuple[bytes, list[tuple[str, bytes]]],
) -> None:
    event = _decodes_or_refuses(*record)
    if event is not None:  # whatever decodes is a valid event: it goes back on the wire
        again = s.encode(event)
        assert s.decode(again.value, again.headers) is not None


@fuzz(scale=0.2)
@given(st.text(min_size=1, max_size=5), st.sampled_from(["observation", "tool_result", "info"]))
def test_lone_surrogates_are_refused_at_encode_naming_the_field(text: str, field: str) -> None:
    bad = text + "\ud800"
    value: object = {"k": bad} if field == "info" else bad
    step = s.Step(
        episode_id="e", step_index=0, env="os", task_id="t", policy_version=0, **{field: value}
    )
    with pytest.raises(s.EncodeError) as caught:
        s.encode(step)
    message = str(caught.value)
    assert one_line(message) and field in message and "step/2" in message


def test_an_event_over_the_record_limit_is_refused_at_encode_with_size_and_limit() -> None:
    limit = codec.MAX_PAYLOAD_BYTES - codec.RECORD_OVERHEAD_BYTES
    base = dict(
        episode_id="ep-big",
        step_index=0,
        env="os",
        task_id="t",
        policy_version=0,
        produced_at=1.5e9,
    )
    empty = s.encode(s.Step(**base, observation=""))
    room = limit - codec.record_size(empty.key, empty.value, empty.headers)
    fits = s.Step(**base, observation="x" * room)
    record = s.encode(fits)
    assert codec.record_size(record.key, record.value, record.headers) == limit
    assert s.decode(record.value, record.headers) == fits
    with pytest.raises(s.EncodeError) as caught:
        s.encode(s.Step(**base, observation="x" * (room + 1)))
    message = str(caught.value)
    assert one_line(message)
    assert f"{limit + 1} bytes" in message and f"{limit}-byte" in message and "ep-big" in message


def test_a_record_over_the_limit_is_refused_at_decode_with_its_size() -> None:
    record = s.encode(s.Step(episode_id="e", step_index=0, env="os", task_id="t", policy_version=0))
    value = record.value[:-1] + b" " * codec.MAX_PAYLOAD_BYTES + b"}"
    with pytest.raises(s.DecodeError, match=f"payload is {len(value)} bytes, over the"):
        s.decode(value, record.headers)


@fuzz()
@given(raw_headers, st.none() | st.binary(max_size=30), st.text(max_size=30))
def test_dead_letter_headers_round_trip_and_any_headers_read_back(
    hdrs: list[tuple[str, bytes | None]] | None, value: bytes | None, error: str
) -> None:
    wire = s.DeadLetter.wire_headers(hdrs, error, "sf.steps", 2, 41)
    letter = s.DeadLetter.from_record(b"k", value, wire)
    assert (letter.origin_topic, letter.origin_partition, letter.origin_offset) == (
        "sf.steps",
        2,
        41,
    )
    assert letter.error == error.encode("utf-8", "replace")[:4096].decode("utf-8", "replace")
    # a record on the dead-letter topic whose headers are anything at all still reads back
    s.DeadLetter.from_record(None, value, [(k, v or b"") for k, v in hdrs or ()])


def _verdict(**extra: object) -> s.Verdict:
    return s.Verdict(
        episode_id="e", source_event_id="x", checker="c", risk_type="r", score=0.5, **extra
    )


@pytest.mark.parametrize(
    "event",
    [
        _verdict(env=""),  # was: "header 'sf-env'=None disagrees with the payload ('')"
        s.Score(episode_id="e", scorer="x", scores={}, composite=float("nan")),  # was: null
        s.Step(
            episode_id="e",
            step_index=0,
            env="os",
            task_id="t",
            policy_version=0,
            token_ids=[1],
            logprobs=[float("-inf")],
        ),  # was: "field 'logprobs.0'"
    ],
    ids=["empty-env", "nan-composite", "minus-inf-logprob"],
)
def test_minimal_cases_the_fuzzer_found_round_trip(event: s.Event) -> None:
    record = s.encode(event)
    assert s.encode(s.decode(record.value, record.headers)).value == record.value
