"""Commands that talk to Kafka say "cannot reach the broker" only when it could not be
reached; other failures are named as what they are."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from aiokafka.errors import KafkaConnectionError

from safactory.cli.errors import broker_failure


def test_the_broker_hint_is_given_only_for_an_unreachable_broker() -> None:
    down = broker_failure(KafkaConnectionError("Unable to bootstrap"), "127.0.0.1:1")
    assert "cannot reach the Kafka broker at 127.0.0.1:1" in down
    assert "safactory broker up" in down
    bad = broker_failure(ValueError("config.toml: line 3: expected '='"), "127.0.0.1:1")
    assert bad == "ValueError: config.toml: line 3: expected '='"
    assert "broker" not in bad


def cli(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """``safactory ARGS`` in its own process, with ``env`` added to the environment."""
    return subprocess.run(
        [sys.executable, "-m", "safactory.cli.main", *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_command_against_a_closed_port_fails_in_one_line_without_a_traceback() -> None:
    done = cli("topics", "list", SF_KAFKA_BOOTSTRAP="127.0.0.1:1")
    said = " ".join(done.stderr.split())
    assert done.returncode == 1
    assert "cannot reach the Kafka broker at 127.0.0.1:1" in said
    assert "Traceback" not in done.stderr


def test_commands_that_need_the_broker_say_so_in_one_line_before_loading_anything() -> None:
    env = {
        "SF_KAFKA_BOOTSTRAP": "127.0.0.1:1",
        "SF_BROKER_WAIT_S": "3",  # a worker waits this long for a restarting broker
        "COLUMNS": "1000",  # one line is one line, not wrapped at 80
    }
    for command in (
        ["simulate", "run", "--env", "os"],
        ["gateway", "--upstream", "http://127.0.0.1:9/v1"],
        ["worker", "audit"],
        ["import", "--help"],  # help needs no broker
    ):
        started = time.monotonic()
        done = cli(*command, **env)
        if command[-1] == "--help":
            assert done.returncode == 0 and "Usage" in done.stdout
            continue
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1, (command, done.stderr[-1500:])
        assert len(lines) == 1 and "cannot reach the Kafka broker at 127.0.0.1:1" in lines[0]
        assert "safactory broker up" in lines[0] and done.stdout == ""
        assert time.monotonic() - started < 30  # no model was loaded first


def test_a_model_server_on_a_store_that_does_not_exist_stops_with_one_line(
    tmp_path: Path,
) -> None:
    done = cli("model-server", "weights/p/current", cwd=tmp_path, COLUMNS="1000")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-1500:]
    assert "weights/p/current: no such folder" in lines[0] and "--wait" in lines[0]


def test_a_plan_run_on_a_lancedb_that_does_not_exist_stops_with_one_line(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text('{"intent": "steps", "steps": [{"op": "select", "table": "steps"}]}')
    done = cli(
        "data", "ask", "--plan", str(plan), "--yes", "--db", str(tmp_path / "none"), COLUMNS="1000"
    )
    assert done.returncode == 2
    assert f"no LanceDB at {tmp_path / 'none'}: the sink writes one" in done.stderr
    assert "bwrap" not in done.stderr and "Traceback" not in done.stderr
