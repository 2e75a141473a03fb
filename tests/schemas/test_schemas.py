"""The event contract without a broker: codec round trip, header contract, clear errors."""

from __future__ import annotations

import json

import pytest

from safactory import schemas as s
from safactory.schemas import codec
from safactory.schemas import headers as h


def test_every_event_type_has_an_example(events: list[s.Event]) -> None:
    assert {type(e) for e in events} == set(s.EVENT_TYPES)


def test_codec_round_trip_is_exact_and_deterministic(events: list[s.Event]) -> None:
    for event in events:
        record = s.encode(event)
        assert s.decode(record.value, record.headers) == event
        assert s.encode(event).value == record.value  # deterministic bytes


def test_headers_are_stamped_from_the_event(events: list[s.Event]) -> None:
    step = next(e for e in events if isinstance(e, s.Step))
    hdrs = dict(s.encode(step).headers)
    assert hdrs[h.SCHEMA] == b"step/2"
    assert hdrs[h.POLICY_VERSION] == b"3"
    assert hdrs[h.EPISODE] == b"ep-1"
    assert hdrs[h.ENV] == b"os"
    assert hdrs[h.TRACE] == b"ab12"
    assert float(hdrs[h.PRODUCED_AT]) == step.produced_at
    traj = next(e for e in events if isinstance(e, s.Trajectory))
    assert dict(s.encode(traj).headers)[h.POLICY_VERSION] == b"3"  # the oldest version
    assert s.encode(traj).key == b"g-1"  # trajectories are keyed by group


def test_step_ids_are_deterministic() -> None:
    a = s.Step(episode_id="e", step_index=4, env="os", task_id="t", policy_version=0)
    b = s.Step(episode_id="e", step_index=4, env="os", task_id="t", policy_version=0)
    assert a.event_id == b.event_id == s.step_id("e", 4)
    assert s.derive_id("audit", 1, a.event_id) == s.derive_id("audit", 1, a.event_id)
    assert s.derive_id("audit", 1, a.event_id) != s.derive_id("audit", 2, a.event_id)


def test_validation_error_names_the_field() -> None:
    good = s.encode(s.Step(episode_id="e", step_index=0, env="os", task_id="t", policy_version=1))
    payload = json.loads(good.value)
    payload["step_index"] = "three"
    with pytest.raises(s.DecodeError, match=r"step/2: field 'step_index'"):
        s.decode(json.dumps(payload).encode(), good.headers)
    payload["step_index"] = 0
    payload["action"] = {"text": 5}
    with pytest.raises(s.DecodeError, match=r"field 'action.text'"):
        s.decode(json.dumps(payload).encode(), good.headers)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda hs: [x for x in hs if x[0] != h.SCHEMA], "'sf-schema' is missing"),
        (lambda hs: [(k, b"nope/1" if k == h.SCHEMA else v) for k, v in hs], "not a known schema"),
        (lambda hs: [(k, b"step" if k == h.SCHEMA else v) for k, v in hs], "form '<type>/<int>'"),
        (lambda hs: [(k, b"x" if k == h.POLICY_VERSION else v) for k, v in hs], "not an integer"),
        (lambda hs: [(k, b"-2" if k == h.POLICY_VERSION else v) for k, v in hs], "negative"),
        (lambda hs: [(k, b"9" if k == h.POLICY_VERSION else v) for k, v in hs], "disagrees"),
        (lambda hs: [(k, b"other" if k == h.EPISODE else v) for k, v in hs], "disagrees"),
        (lambda hs: [*hs, (h.ENV, b"os")], "more than once"),
        (lambda hs: [(k, b"\xff" if k == h.ENV else v) for k, v in hs], "not valid UTF-8"),
        (lambda hs: [(k, b"soon" if k == h.PRODUCED_AT else v) for k, v in hs], "unix seconds"),
    ],
)
def test_header_violations_are_decode_errors(mutate, message: str) -> None:
    good = s.encode(s.Step(episode_id="e", step_index=0, env="os", task_id="t", policy_version=1))
    with pytest.raises(s.DecodeError, match=message):
        s.decode(good.value, mutate(list(good.headers)))


def test_bad_payloads_are_decode_errors() -> None:
    good = s.encode(s.Step(episode_id="e", step_index=0, env="os", task_id="t", policy_version=1))
    for value, message in [
        (None, "tombstone"),
        (b"{not json", "Invalid JSON"),
        (good.value[:-1] + b',"surprise":1}', "Extra inputs are not permitted"),
        (b"[]", "should be an object"),
    ]:
        with pytest.raises(s.DecodeError, match=message):
            s.decode(value, good.headers)


def test_logprobs_must_match_tokens() -> None:
    with pytest.raises(ValueError, match="one entry per token id"):
        s.Step(
            episode_id="e",
            step_index=0,
            env="os",
            task_id="t",
            policy_version=0,
            token_ids=[1, 2],
            logprobs=[-0.1],
        )


def test_dead_letter_headers_round_trip() -> None:
    original = [(h.SCHEMA, b"step/1"), ("custom", b"x")]
    wire = s.DeadLetter.wire_headers(original, "decode: bad", "sf.steps", 2, 41)
    letter = s.DeadLetter.from_record(b"k", b"v", wire)
    assert (letter.error, letter.origin_topic, letter.origin_partition, letter.origin_offset) == (
        "decode: bad",
        "sf.steps",
        2,
        41,
    )
    assert letter.headers == original
    assert letter.origin_group is None  # written without a group
    grouped = s.DeadLetter.wire_headers(original, "decode: bad", "sf.steps", 2, 41, "audit-t1")
    assert s.DeadLetter.from_record(b"k", b"v", grouped).origin_group == "audit-t1"


def test_a_record_of_an_earlier_schema_version_still_decodes() -> None:
    """step/1, episode_started/1, verdict/1, trajectory/1 and policy_version/1 records (as
    producers wrote them before the fields of their /2 existed) decode with the defaults."""
    old = {
        b"step/1": {"episode_id": "e", "step_index": 0, "env": "choice", "task_id": "t"},
        b"episode_started/1": {
            "episode_id": "e",
            "task_id": "t",
            "env": "choice",
            "policy_name": "p",
        },
        b"verdict/1": {
            "episode_id": "e",
            "source_event_id": "s",
            "checker": "c",
            "risk_type": "r",
            "score": 0.5,
        },
        b"alert/1": {
            "episode_id": "e",
            "source_event_id": "s",
            "checker": "c",
            "risk_type": "r",
            "score": 0.5,
        },
        b"trajectory/1": {
            "episode_id": "e",
            "group_id": "g",
            "task_id": "t",
            "env": "choice",
            "steps": [{"step_index": 0, "policy_version": 1}],
            "outcome": "success",
            "reward": 1.0,
            "max_policy_version": 1,
        },
        b"policy_version/1": {"policy_name": "p", "uri": "/w", "sha256": "0" * 64},
    }
    for schema, payload in old.items():
        payload = {"event_id": "x", "produced_at": 1.0, "policy_version": 1, **payload}
        if schema in (b"episode_started/1", b"verdict/1", b"alert/1"):
            payload["env"] = payload.get("env")
        headers = [(h.SCHEMA, schema), (h.POLICY_VERSION, b"1"), (h.PRODUCED_AT, b"1.0")]
        if "episode_id" in payload:
            headers.append((h.EPISODE, b"e"))
        if payload.get("env"):
            headers.append((h.ENV, payload["env"].encode()))
        event = s.decode(json.dumps(payload).encode(), headers)
        name, version = schema.decode().split("/")
        assert event.schema_id().split("/")[0] == name
        assert int(event.schema_id().split("/")[1]) > int(version)  # upgraded to the current
    step = s.decode(
        json.dumps(
            {"event_id": "x", "produced_at": 1.0, "policy_version": 1, **old[b"step/1"]}
        ).encode(),
        [(h.SCHEMA, b"step/1"), (h.POLICY_VERSION, b"1"), (h.EPISODE, b"e"), (h.ENV, b"choice")],
    )
    assert isinstance(step, s.Step) and step.choices is None


def test_a_new_version_is_refused_by_name_where_it_is_unknown() -> None:
    """A reader that knows only step/1 dead-letters a step/2 record as an unknown schema
    (one clear reason), not as a payload with fields it has never heard of."""
    record = s.encode(
        s.Step(
            episode_id="e",
            step_index=0,
            env="choice",
            task_id="t",
            policy_version=0,
            choices=["ls", "rm -rf /"],
        )
    )
    assert dict(record.headers)[h.SCHEMA] == b"step/2"
    assert s.decode(record.value, record.headers).choices == ["ls", "rm -rf /"]
    known_then = {k: v for k, v in codec._REGISTRY.items() if k != "step/2"}
    with pytest.MonkeyPatch.context() as patch:  # both lookups: the careful and the fast path
        patch.setattr(codec, "_REGISTRY", known_then)
        patch.setattr(codec, "_BY_SCHEMA_BYTES", {k.encode(): v for k, v in known_then.items()})
        with pytest.raises(s.DecodeError, match="'sf-schema'='step/2' is not a known schema"):
            codec.decode(record.value, record.headers)
