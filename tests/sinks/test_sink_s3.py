"""LanceDB on object storage (issue #22, item 2): the sink worker, the replay sink, query and
export on ``s3://`` against a real S3-compatible server (SeaweedFS, started by the
``object_store`` fixture), and one-line errors naming the setting when the store cannot be
reached or the URI is malformed."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from data_episodes import episode_events
from deliveries import deliveries
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra import config
from safactory.infra.config import Settings
from safactory.infra.objectstore import LocalS3
from safactory.infra.producer import EventProducer
from safactory.schemas import Event, Step
from safactory.sinks.lance import LanceSink
from safactory.sinks.location import DbUnavailable, LanceLocation, open_db
from safactory.sinks.options import SinkOptions
from safactory.sinks.worker import run_sink
from safactory.streams.assembly import TrajectoryAssembler

runner = CliRunner()


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    """The CLI's settings read again from the environment the test sets (and after it)."""
    config.get_settings.cache_clear()
    yield
    config.get_settings.cache_clear()


def _rows(db: LanceLocation, table: str) -> list[dict[str, object]]:
    data: pa.Table = open_db(db).open_table(table).to_arrow().drop_columns(["ingested_at"])
    return sorted(data.to_pylist(), key=lambda row: str(row["event_id"]))


def _events() -> list[Event]:
    return [e for n in range(6) for e in episode_events(n, steps=3)]


@pytest.mark.integration
def test_sink_worker_and_replay_sink_store_every_event_exactly_on_s3(
    topics: Settings,
    s3_db: LanceLocation,
    monkeypatch: pytest.MonkeyPatch,
    fresh_settings: None,
    tmp_path: Path,
) -> None:
    events = _events()

    async def publish_and_sink() -> LanceSink:
        async with EventProducer(topics) as producer:
            await producer.publish_many(events)
            await producer.publish(events[1])  # a redelivered step: stored once
        options = SinkOptions(db_path=s3_db, gather_s=0.2, idle_timeout_s=3.0)
        return await run_sink(topics, options)

    monkeypatch.chdir(tmp_path)  # a URI taken for a folder would show up here
    sink = asyncio.run(publish_and_sink())
    assert sink.stats.written == len(events)
    assert list(tmp_path.iterdir()) == []

    # read back through a new connection, as a reader on another machine would
    db = open_db(s3_db)
    sent = {e.event_id: e for e in events}
    stored: dict[str, Event] = {}
    for table in ("steps", "episodes", "verdicts"):
        rows = _rows(s3_db, table)
        for row in rows:
            assert row["event_id"] not in stored  # each event once
            stored[str(row["event_id"])] = type(sent[str(row["event_id"])]).model_validate_json(
                str(row["payload"])
            )
    assert stored == sent
    assert len(_rows(s3_db, "steps")) == sum(isinstance(e, Step) for e in events)
    # the idle exit ran maintenance in a child process: it reached the bucket too
    assert db.open_table("steps").list_indices()

    # the replay sink rebuilds the same rows, offsets included, in another prefix
    rebuilt = LanceLocation(s3_db.uri + "-rebuilt", s3_db.storage_options)
    monkeypatch.setenv("SF_TOPIC_PREFIX", topics.topic_prefix)
    monkeypatch.setenv("SF_KAFKA_BOOTSTRAP", topics.kafka_bootstrap)
    monkeypatch.setenv("SF_LANCE_STORAGE", json.dumps(dict(s3_db.storage_options)))
    result = runner.invoke(app, ["replay", "sink", "--db", rebuilt.uri], terminal_width=200)
    assert result.exit_code == 0, result.output
    for table in ("steps", "episodes", "verdicts"):
        assert _rows(rebuilt, table) == _rows(s3_db, table)


@pytest.fixture
def s3_filled(s3_db: LanceLocation) -> LanceLocation:
    """Nine episodes in two envs and their trajectories, written to ``s3_db`` by the sink."""
    events = [e for n in range(9) for e in episode_events(n, env="bank" if n < 6 else "travel")]
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 2000.0)]
    sink = LanceSink(s3_db)
    sink.write_batch(deliveries(events + trajectories))
    sink.ensure_indexes()
    return s3_db


def test_query_reads_s3_with_storage_options_from_aws_variables(
    s3_filled: LanceLocation,
    object_store: LocalS3,
    monkeypatch: pytest.MonkeyPatch,
    fresh_settings: None,
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT", object_store.endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "any")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "key")
    args = ["query", "--db", s3_filled.uri, "--json", "--limit", "99"]
    result = runner.invoke(app, [*args, "--env", "travel"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert sorted((r["episode_id"], r["step_index"]) for r in rows) == [
        (f"ep-{n}", i) for n in range(6, 9) for i in range(3)
    ]
    result = runner.invoke(app, [*args, "--risk-type", "prompt_injection", "--severity", "high"])
    assert result.exit_code == 0, result.output
    risky = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert sorted(r["episode_id"] for r in risky) == ["ep-0", "ep-3", "ep-6"]


def test_export_reads_s3_named_by_sf_lance_uri_and_storage_setting(
    s3_filled: LanceLocation,
    monkeypatch: pytest.MonkeyPatch,
    fresh_settings: None,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("SF_LANCE_URI", s3_filled.uri)
    options = {**s3_filled.storage_options, "allow_http": True}  # a JSON boolean, as in TOML
    monkeypatch.setenv("SF_LANCE_STORAGE", json.dumps(options))
    out = tmp_path / "train.jsonl"
    result = runner.invoke(
        app, ["export", "--out", str(out), "--env", "bank", "--tag", "run-1"], terminal_width=200
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["metadata"]["episode_id"] for r in records) == [f"ep-{n}" for n in range(6)]
    card = out.with_name(out.name + ".card.md").read_text()
    assert f"{s3_filled.uri} table trajectories" in card
    tags = open_db(s3_filled).open_table("trajectories").tags.list()
    assert "run-1" in tags  # the version read is kept in the bucket


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("command", "uri", "endpoint", "expected"),
    [
        ("query", "s3:///prefix", None, "malformed: no bucket; write s3://bucket/prefix"),
        ("query", "s4://bucket/prefix", None, "unknown scheme"),
        ("query", "s3://no-such-bucket/prefix", None, "bucket 'no-such-bucket' does not exist"),
        ("export", "s3://safactory-tests/x", "closed", "cannot reach the object store at"),
        ("worker", "s3://no-such-bucket/prefix", None, "does not exist"),
    ],
)
def test_an_unusable_s3_db_fails_in_one_line_naming_the_setting(
    s3_db: LanceLocation,
    monkeypatch: pytest.MonkeyPatch,
    fresh_settings: None,
    tmp_path: Path,
    command: str,
    uri: str,
    endpoint: str | None,
    expected: str,
) -> None:
    options = dict(s3_db.storage_options)
    if endpoint == "closed":
        options["aws_endpoint"] = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("SF_LANCE_STORAGE", json.dumps(options))
    args = {
        "query": ["query", "--db", uri],
        "export": ["export", "--db", uri, "--out", str(tmp_path / "x.jsonl")],
        "worker": ["worker", "sink", "--no-embed", "--db", uri],
    }[command]
    result = runner.invoke(app, args, terminal_width=400)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: --db / SF_LANCE_URI"), result.output
    assert expected in result.output, result.output
    if endpoint == "closed":
        assert options["aws_endpoint"] in result.output
    assert "Traceback" not in result.output and "RetryError" not in result.output


def test_the_old_variable_name_fails_instead_of_being_ignored(
    monkeypatch: pytest.MonkeyPatch, fresh_settings: None, tmp_path: Path
) -> None:
    monkeypatch.setenv("SF_LANCEDB", str(tmp_path / "db"))
    result = runner.invoke(app, ["query"], terminal_width=400)
    assert result.exit_code == 1
    assert "SF_LANCEDB was renamed SF_LANCE_URI" in result.output


def test_open_db_refuses_a_uri_without_bucket_before_connecting() -> None:
    with pytest.raises(DbUnavailable, match="no bucket"):
        open_db("s3://")


def test_serve_episode_view_reads_s3(s3_filled: LanceLocation) -> None:
    from fastapi.testclient import TestClient

    from safactory.cli.serve import web_app

    client = TestClient(web_app(Settings(), s3_filled, follow=False), base_url="http://127.0.0.1")
    body = client.get("/api/episodes/ep-3").json()
    assert [s["step_index"] for s in body["steps"]] == [0, 1, 2]
    severities = [[v["severity"] for v in s["verdicts"]] for s in body["steps"]]
    assert severities == [["none"], ["none"], ["high"]]  # the injected step, read from S3
    assert client.get("/api/episodes/ep-none").status_code == 404
