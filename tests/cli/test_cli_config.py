"""Configuration precedence and the broker/topics commands against the real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra import config
from safactory.infra.broker import BrokerError, LocalBroker
from safactory.infra.config import Settings


def test_env_beats_file_beats_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "sf.toml"
    cfg.write_text('kafka_bootstrap = "file-host:9092"\ntopic_prefix = "file."\n')
    monkeypatch.setenv("SF_CONFIG", str(cfg))
    monkeypatch.delenv("SF_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.setenv("SF_TOPIC_PREFIX", "env.")
    settings = Settings()
    assert settings.kafka_bootstrap == "file-host:9092"  # from the file
    assert settings.topic("steps") == "env.steps"  # env var wins over the file
    assert settings.default_partitions == 3  # default


def test_missing_config_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SF_CONFIG", "/nonexistent/safactory.toml")
    with pytest.raises(FileNotFoundError, match=r"SF_CONFIG=/nonexistent/safactory\.toml"):
        Settings()


def test_unknown_config_key_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "sf.toml"
    cfg.write_text('kafka_bootstrapp = "typo:9092"\n')
    monkeypatch.setenv("SF_CONFIG", str(cfg))
    with pytest.raises(ValueError, match="kafka_bootstrapp"):
        Settings()


def test_missing_java_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no java, no mvn
    broker = LocalBroker(tmp_path, kafka_version="0.0-test")
    with pytest.raises(BrokerError, match=r"'java' not found on PATH.*apt-get install"):
        broker.resolve_jars()


@pytest.mark.integration
def test_topics_list_shows_the_catalogue(topics: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SF_KAFKA_BOOTSTRAP", topics.kafka_bootstrap)
    monkeypatch.setenv("SF_TOPIC_PREFIX", topics.topic_prefix)
    config.get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["topics", "list", "--json"])
    finally:
        config.get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["topic"] for r in rows} == {
        topics.topic(n)
        for n in (
            "tasks",
            "steps",
            "episodes",
            "verdicts",
            "alerts",
            "trajectories",
            "scores",
            "skills",
            "policy",
            "control",
            "labels",
            "dlq",
        )
    }
    assert all(r["exists"] for r in rows)
    by_name = {r["topic"]: r for r in rows}
    assert by_name[topics.topic("policy")]["cleanup"] == "compact"
    assert by_name[topics.topic("steps")]["partitions"] == 3


def test_help_explains_every_command() -> None:
    for args in (
        ["--help"],
        ["broker", "--help"],
        ["topics", "--help"],
        ["broker", "up", "--help"],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0
        assert "Usage" in result.output
