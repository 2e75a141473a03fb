"""`safactory audit` streams: a record at a time in, a line at a time out. A byte that is not
UTF-8 costs its record only; Ctrl-C stops within a second and keeps every line written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from safactory.cli.main import app

RULES = "harm.beyond_scope,harm.unrequested_action,rule.secrets"


def chat(n: int) -> dict:
    """An OpenAI chat trajectory with one tool call."""
    call = {"id": "c1", "type": "function", "function": {"name": "rm", "arguments": "{}"}}
    return {
        "id": f"r{n}",
        "label": n % 2,
        "messages": [
            {"role": "user", "content": f"tidy folder {n}"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
            {"role": "assistant", "content": "Done."},
        ],
    }


def test_a_bad_byte_costs_its_record_only(tmp_path: Path) -> None:
    lines = [json.dumps(chat(n)).encode() for n in range(5)]
    lines[2] = lines[2].replace(b"tidy", b"ti\xffdy")  # not UTF-8
    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_bytes(b"\n".join(lines) + b"\n")
    listed = tmp_path / "runs.json"
    listed.write_bytes(b"[" + b",\n".join(lines) + b"]")
    for path, bad_id in ((jsonl, "runs.jsonl:3"), (listed, "runs.json:2")):
        out = tmp_path / f"{path.name}.out"
        result = CliRunner().invoke(
            app, ["audit", str(path), "-f", "openai", "--out", str(out), "--checkers", RULES]
        )
        assert result.exit_code == 0, result.output
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["id"] for r in rows] == ["r0", "r1", bad_id, "r3", "r4"]
        assert rows[2]["unsafe"] is None and "not UTF-8" in rows[2]["error"]
        assert all(r["unsafe"] is not None for r in rows[:2] + rows[3:])


def test_a_syntax_error_in_a_list_keeps_the_records_before_it(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text("[" + ",".join(json.dumps(chat(n)) for n in range(3)) + ',{"id": ')
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(
        app, ["audit", str(path), "-f", "openai", "--out", str(out), "--checkers", RULES]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows[:3]] == ["r0", "r1", "r2"]
    assert rows[3]["unsafe"] is None and "not valid JSON" in rows[3]["error"]


def test_ctrl_c_stops_within_a_second_and_keeps_the_lines(tmp_path: Path) -> None:
    path = tmp_path / "many.jsonl"
    with path.open("w") as handle:
        for n in range(50_000):
            handle.write(json.dumps(chat(n)) + "\n")
    out = tmp_path / "out.jsonl"
    command = ["audit", str(path), "-f", "openai", "--out", str(out), "--checkers", RULES]
    proc = subprocess.Popen(
        [sys.executable, "-m", "safactory.cli.main", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    try:
        deadline = time.monotonic() + 120
        while not (out.exists() and out.stat().st_size > 20_000):  # streaming: lines appear
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        output, _ = proc.communicate(timeout=10)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    assert proc.returncode == 130, output
    assert took < 1.5, f"stopped {took:.1f} s after Ctrl-C"
    rows = [json.loads(line) for line in out.read_text().splitlines()]  # every line whole
    assert 0 < len(rows) < 50_000
    assert [r["id"] for r in rows] == [f"r{n}" for n in range(len(rows))]
    assert b"stopped (Ctrl-C)" in output
