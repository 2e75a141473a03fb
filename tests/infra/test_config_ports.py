"""Settings refuse impossible values with the field's name, by environment variable too."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from safactory.infra.config import Settings


@pytest.mark.parametrize("value", ["-1", "0", "70000"])
def test_a_port_outside_1_to_65535_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SF_BROKER_PORT", value)
    with pytest.raises(ValidationError, match="broker_port"):
        Settings()


def test_a_valid_port_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SF_BROKER_PORT", "19092")
    assert Settings().broker_port == 19092


def test_a_topic_prefix_gets_its_separator() -> None:
    assert Settings(topic_prefix="gwtest").topic("steps") == "gwtest.steps"
    assert Settings(topic_prefix="team1-").topic("steps") == "team1-steps"
    assert Settings().topic("steps") == "sf.steps"
