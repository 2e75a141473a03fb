"""`safactory audit` and `safactory import` on real trace files."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from topic_records import collect
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra.config import Settings
from safactory.schemas import Step, codec

FAST = "harm.beyond_scope,harm.unrequested_action,harm.steered_action"


def _subset(shared_data: Path, tmp_path: Path, n: int = 8) -> Path:
    records = json.loads(
        (shared_data / "audit/trajectories/rjudge/Finance_harmful.json").read_text()
    )[:n]
    path = tmp_path / "subset.json"
    path.write_text(json.dumps(records))
    return path


def test_audit_writes_one_line_per_record_and_metrics(shared_data: Path, tmp_path: Path) -> None:
    subset = _subset(shared_data, tmp_path)
    out = tmp_path / "out" / "verdicts.jsonl"
    result = CliRunner().invoke(
        app, ["audit", str(subset), "--format", "rjudge", "--out", str(out), "--checkers", FAST]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in lines] == [str(r["id"]) for r in json.loads(subset.read_text())]
    for row in lines:
        assert set(row) == {
            "id",
            "unsafe",
            "decision",
            "probability",
            "score",
            "risk_types",
            "first_unsafe_step",
            "labels",
        }
        assert row["decision"] in ("block", "warn", "uncertain", "allow")
        assert row["unsafe"] == (row["decision"] == "block")
        assert (row["first_unsafe_step"] is not None) == row["unsafe"]
    rows = {
        cells[0]: cells[1:]
        for line in result.output.splitlines()
        if len(cells := [c.strip() for c in line.strip("│ ").split("│")]) == 7
    }
    flagged = sum(row["unsafe"] for row in lines)  # every record of this file is unsafe
    assert rows["all"][:3] == [
        str(len(lines)),
        "100.0" if flagged else "0.0",
        f"{100 * flagged / len(lines):.1f}",
    ]
    assert rows["subset"][0] == str(len(lines)) and list(rows)[-1] == "all"  # group: file stem


def test_unreadable_records_are_reported_and_the_rest_audited(
    shared_data: Path, tmp_path: Path
) -> None:
    good = json.loads(_subset(shared_data, tmp_path, n=2).read_text())
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([good[0], {"id": "broken", "contents": "oops"}, good[1]]))
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["audit", str(mixed), "--out", str(out), "--checkers", FAST])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in lines] == [str(good[0]["id"]), "broken", str(good[1]["id"])]
    assert lines[1]["unsafe"] is None and "field 'contents'" in lines[1]["error"]
    assert all(isinstance(lines[i]["unsafe"], bool) for i in (0, 2))
    assert "1 of 3 records skipped" in result.output
    strict = CliRunner().invoke(app, ["audit", str(mixed), "--strict", "--checkers", FAST])
    assert strict.exit_code == 1 and "record 1 (id broken): field 'contents'" in strict.output


def test_audit_errors_name_the_problem(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}')
    result = CliRunner().invoke(app, ["audit", str(bad), "--format", "rjudge"])
    assert result.exit_code == 1 and "expected a JSON list" in result.output
    result = CliRunner().invoke(app, ["audit", str(bad), "-f", "rjudge", "--checkers", "nope"])
    assert result.exit_code == 1 and "unknown checker" in result.output
    result = CliRunner().invoke(app, ["audit", str(bad)])  # no --format: told, or asked for
    assert result.exit_code == 1 and "pass --format" in result.output


@pytest.mark.integration
async def test_import_publishes_steps(topics: Settings, shared_data: Path, tmp_path: Path) -> None:
    subset = _subset(shared_data, tmp_path, n=3)
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": topics.kafka_bootstrap,
        "SF_TOPIC_PREFIX": topics.topic_prefix,
    }
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "safactory.cli.main", "import", str(subset), "-f", "rjudge"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = sum(
        1 for r in json.loads(subset.read_text()) for t in r["contents"][0] if t["role"] == "agent"
    )
    records = await collect(topics, topics.topic("steps"), lambda rs: len(rs) >= expected, 10)
    steps = [codec.decode(m.value, m.headers) for m in records]
    assert len(steps) == expected
    assert all(isinstance(s, Step) and s.env.startswith("rjudge:") for s in steps)


def test_checkers_minus_a_name_is_the_default_set_less_that_one(tmp_path: Path) -> None:
    from safactory.streams.audit.engine import configured_engine
    from safactory.streams.audit.registry import default_names

    less = configured_engine("-harm.steered_action,-rule.pii")
    assert [c.name for c in less.checkers] == [
        n for n in default_names() if n not in ("harm.steered_action", "rule.pii")
    ]
    picked = configured_engine("rule.pii,rule.secrets,-rule.pii")
    assert [c.name for c in picked.checkers] == ["rule.secrets"]
    args = ["audit", str(tmp_path), "-f", "rjudge", "--checkers", "-rule.piii"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1 and "no checker rule.piii to leave out" in result.output
