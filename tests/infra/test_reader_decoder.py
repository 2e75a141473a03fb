"""The one decode-and-skip loop of group-less readers (``infra.reader.Decoder``)."""

from __future__ import annotations

import logging

import pytest
from aiokafka import ConsumerRecord

from safactory.infra.consumer import Delivery
from safactory.infra.reader import Decoder
from safactory.schemas import PolicyVersion, codec


def _record(offset: int, value: bytes | None, headers: list[tuple[str, bytes]]) -> ConsumerRecord:
    return ConsumerRecord(
        "sf.policy", 0, offset, 0, 0, b"a", value, None, 1, len(value or b""), tuple(headers)
    )


def test_events_come_with_their_records_tombstones_pass_and_bad_records_are_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = PolicyVersion(policy_name="a", policy_version=1, uri="mem://a/1", sha256="a" * 64)
    encoded = codec.encode(event)
    good = _record(0, encoded.value, list(encoded.headers))
    records = [good, _record(1, None, []), _record(2, b"not json", [])]
    decoder = Decoder("test-reader")
    with caplog.at_level(logging.WARNING):
        decoded = list(decoder(records))
    assert decoded == [(good, event)]
    assert decoder.undecodable == 1
    assert "test-reader: undecodable record sf.policy-0 at offset 2" in caplog.text
    assert Delivery.of(good, event).offset == 0
