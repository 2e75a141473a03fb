"""``safactory query`` and ``export`` answer from a LanceDB filled by the sink."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from data_episodes import episode_events
from deliveries import deliveries
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra.embedding import MiniLM as MiniLMEmbedder
from safactory.sinks.lance import LanceSink
from safactory.streams.assembly import TrajectoryAssembler

runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Nine episodes (three unsafe: prompt injection, HIGH), their trajectories, in two envs."""
    path = tmp_path_factory.mktemp("lance") / "db"
    events = [e for n in range(9) for e in episode_events(n, env="bank" if n < 6 else "travel")]
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 2000.0)]
    assert len(trajectories) == 9
    sink = LanceSink(path, embedder=MiniLMEmbedder())
    sink.write_batch(deliveries(events + trajectories))
    sink.ensure_indexes()
    return path


def _cli(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_filters_by_env_risk_severity_and_policy_version(db: Path) -> None:
    rows = _json_lines(_cli("query", "--db", str(db), "--env", "travel", "--json", "--limit", "99"))
    assert len(rows) == 9 and {r["env"] for r in rows} == {"travel"}
    risky = _json_lines(
        _cli(
            "query",
            "--db",
            str(db),
            "--risk-type",
            "prompt_injection",
            "--severity",
            "high",
            "--json",
        )
    )
    assert sorted(r["episode_id"] for r in risky) == ["ep-0", "ep-3", "ep-6"]
    assert all(r["step_index"] == 2 for r in risky)  # the step that was judged unsafe
    assert (
        _json_lines(
            _cli(
                "query",
                "--db",
                str(db),
                "--risk-type",
                "prompt_injection",
                "--severity",
                "critical",
                "--json",
            )
        )
        == []
    )
    v1 = _json_lines(
        _cli("query", "--db", str(db), "--table", "trajectories", "--policy-version", "1", "--json")
    )
    assert sorted(r["episode_id"] for r in v1) == ["ep-1", "ep-4", "ep-7"]
    table = _cli("query", "--db", str(db), "--table", "verdicts", "--severity", "high")
    assert "prompt_injection" in table and "3 rows" in table


def test_semantic_search_finds_text_by_meaning(db: Path) -> None:
    rows = _json_lines(
        _cli(
            "query",
            "--db",
            str(db),
            "--like",
            "an attacker tells the agent to leak credentials",
            "--json",
            "--limit",
            "3",
        )
    )
    assert len(rows) == 3
    assert all("ignore previous instructions" in r["observation"] for r in rows)
    assert rows[0]["_distance"] <= rows[-1]["_distance"]


def test_export_jsonl_and_parquet_with_card(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "safe.jsonl"
    _cli("export", "--db", str(db), "--out", str(out), "--min-reward", "0.5", "--tag", "run-7")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6 and all(r["metadata"]["reward"] >= 0.5 for r in records)
    first = records[0]["messages"]
    assert first[0]["role"] == "user" and all(m["role"] == "assistant" for m in first[1:])
    card = (tmp_path / "safe.jsonl.card.md").read_text()
    assert "**records**: 6" in card and "reward>=0.5" in card and "lancedb_version" in card
    assert "run-7" in card
    parquet = tmp_path / "bank.parquet"
    _cli("export", "--db", str(db), "--out", str(parquet), "--format", "parquet", "--env", "bank")
    data = pq.read_table(parquet)
    assert data.num_rows == 6 and set(data["env"].to_pylist()) == {"bank"}
    assert all(len(i) == 32 for i in data["trajectory_id"].to_pylist())


def test_bad_input_names_the_option_and_fix(db: Path) -> None:
    result = runner.invoke(app, ["query", "--db", str(db), "--severity", "awful"])
    assert result.exit_code == 1 and "--severity 'awful'" in result.output
    result = runner.invoke(app, ["query", "--db", str(db), "--since", "yesterday"])
    assert result.exit_code == 1 and "ISO 8601" in result.output
    result = runner.invoke(app, ["query", "--db", str(db / "nope"), "--table", "steps"])
    assert result.exit_code == 1 and "safactory worker sink" in result.output


def test_bad_limits_formats_and_rewards_are_refused_before_anything_is_written(
    db: Path, tmp_path: Path
) -> None:
    for limit in ("0", "-5"):
        result = runner.invoke(app, ["query", "--db", str(db), "--limit", limit])
        assert result.exit_code == 2 and "--limit" in result.output, limit
    out = tmp_path / "x.parquet"
    result = runner.invoke(app, ["export", "--db", str(db), "--out", str(out), "--format", "jsonl"])
    assert result.exit_code == 1 and "--format parquet" in result.output
    assert not out.exists()
    out = tmp_path / "x.jsonl"
    result = runner.invoke(
        app, ["export", "--db", str(db), "--out", str(out), "--min-reward", "nan"]
    )
    assert result.exit_code == 1 and "finite" in result.output
    assert not out.exists()


def test_a_missing_database_folder_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-db"
    for args in (["query"], ["export", "--out", str(tmp_path / "t.jsonl")]):
        result = runner.invoke(app, [*args, "--db", str(missing)])
        said = " ".join(result.output.split())  # rich wraps long lines
        assert result.exit_code == 1 and "no LanceDB database there" in said
        assert not missing.exists()


def test_a_tag_already_used_fails_before_the_file_is_written(db: Path, tmp_path: Path) -> None:
    _cli("export", "--db", str(db), "--out", str(tmp_path / "a.jsonl"), "--tag", "once")
    again = tmp_path / "b.jsonl"
    result = runner.invoke(app, ["export", "--db", str(db), "--out", str(again), "--tag", "once"])
    assert result.exit_code == 1 and "choose a tag not used yet" in " ".join(result.output.split())
    assert not again.exists()
