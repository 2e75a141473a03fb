"""`safactory monitor` in a real terminal (tmux): a planted alert appears on the dashboard
within a second or two of being published, and `q` ends it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import Alert, Evidence, Severity

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

REPO = Path(__file__).resolve().parents[3]
SHOW_WITHIN_S = 2.0


class Tmux:
    """A tmux server of the test's own (``-L``), so no other session is touched."""

    def __init__(self) -> None:
        self.socket = f"sf-test-{uuid.uuid4().hex[:8]}"

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=check,
            timeout=10,
        )

    def pane(self) -> str:
        return self("capture-pane", "-p", "-t", "monitor", check=False).stdout

    def alive(self) -> bool:
        return self("has-session", "-t", "monitor", check=False).returncode == 0


async def _wait(
    check: Callable[[], bool], timeout_s: float, interval_s: float = 0.05
) -> float | None:
    """Seconds until ``check()`` held, or None after ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if check():
            return time.monotonic() - start
        await asyncio.sleep(interval_s)
    return None


async def test_planted_alert_appears_in_the_terminal_and_q_quits(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    tmux = Tmux()
    env = {"SF_KAFKA_BOOTSTRAP": topics.kafka_bootstrap, "SF_TOPIC_PREFIX": topics.topic_prefix}
    errors = tmp_path / "monitor.stderr"
    # pytest exports COLUMNS=80 and LINES=24, which rich would prefer to the pane's size
    command = (
        f"cd {REPO} && env -u COLUMNS -u LINES {sys.executable} -m safactory.cli.main monitor "
        f"2>{errors}"
    )
    settings_env = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
    tmux("new-session", "-d", "-s", "monitor", "-x", "200", "-y", "50", *settings_env, command)
    try:
        ready = await _wait(lambda: " live " in tmux.pane(), 30)
        assert ready is not None, f"monitor never went live:\n{tmux.pane()}\n{errors.read_text()}"
        marker = f"planted-{uuid.uuid4().hex[:8]}"
        alert = Alert(
            episode_id="ep-planted-1",
            source_event_id="s1",
            step_index=4,
            env="os",
            checker="harm.beyond_scope",
            risk_type="destructive_operation",
            severity=Severity.CRITICAL,
            score=1.0,
            evidence=[Evidence(text=f"{marker} rm -rf /var/lib/data", field="action")],
        )
        await producer.publish(alert)
        published = time.monotonic()
        shown = await _wait(lambda: marker in tmux.pane(), 10, interval_s=0.02)
        pane = tmux.pane()
        (tmp_path / "pane.txt").write_text(pane)
        assert shown is not None, f"alert never shown:\n{pane}"
        print(
            f"\nalert on the tmux pane {shown * 1000:.0f} ms after its publish was acked "
            f"(pane saved to {tmp_path / 'pane.txt'})"
        )
        assert shown <= SHOW_WITHIN_S, f"alert took {shown:.2f}s to appear"
        row = next(line for line in pane.splitlines() if marker in line)
        assert "critical" in row and "destructive_operation" in row and "ep-planted-1:4" in row
        assert time.monotonic() - published < 15
        tmux("send-keys", "-t", "monitor", "q")
        assert await _wait(lambda: not tmux.alive(), 10) is not None, "q did not end the monitor"
    finally:
        tmux("kill-server", check=False)
    assert "Traceback" not in errors.read_text()
