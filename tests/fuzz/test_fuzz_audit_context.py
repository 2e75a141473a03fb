"""Fuzz the audit worker's context decoder: any stored bytes decode to a step or raise
pydantic's ValidationError (a ValueError the worker handles), nothing else."""

from __future__ import annotations

import json

from fuzz_strategies import EVENTS, fuzz, json_values
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from safactory import schemas as s
from safactory.streams.audit.processor import compact, decode_step, encode_step


@fuzz()
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_any_context_bytes_decode_or_raise_validation_error(value: bytes) -> None:
    try:
        assert isinstance(decode_step(value), s.Step)
    except ValidationError as exc:
        assert exc.error_count() >= 1


@fuzz()
@given(EVENTS[s.Step])
def test_every_step_survives_the_context_topic(step: s.Step) -> None:
    kept = compact(step)  # type: ignore[arg-type]
    assert encode_step(decode_step(encode_step(kept))) == encode_step(kept)
