"""`safactory monitor` and `safactory serve` refuse in one line: an unreachable broker (before
any screen is taken or port opened) and an exposed bind without a token."""

from __future__ import annotations

import pytest
import typer
from click.testing import CliRunner

from safactory.cli.main import app
from safactory.infra import config

COMMAND = typer.main.get_command(app)
CLOSED = "127.0.0.1:1"
"""A loopback port nothing listens on: connecting fails at once."""


def _run(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    config.get_settings.cache_clear()
    try:
        result = CliRunner().invoke(COMMAND, args, env={"COLUMNS": "200", **env})
    finally:
        config.get_settings.cache_clear()
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.stderr


@pytest.mark.parametrize("command", ["monitor", "serve"])
def test_an_unreachable_broker_is_one_line(command: str) -> None:
    code, err = _run([command], {"SF_KAFKA_BOOTSTRAP": CLOSED})
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, err
    assert lines[0].startswith(f"error: cannot reach the Kafka broker at {CLOSED}")


def test_serve_refuses_an_exposed_bind_without_a_token() -> None:
    code, err = _run(["serve", "--host", "0.0.0.0"], {"SF_SERVE_TOKEN": ""})
    assert code == 1 and err.count("\n") == 1
    assert "--host 0.0.0.0 is reachable from other machines; pass --token" in err
