"""`safactory monitor` in a real terminal (tmux) answers a paused episode: the pause on
``sf.control`` shows, ``a`` publishes the approval there (what the waiting runner reads)."""

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
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import Control, ControlCommand

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

REPO = Path(__file__).resolve().parents[3]


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["tmux", "-L", socket, *args], capture_output=True, text=True, check=False, timeout=10
    )


async def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.integration
async def test_a_key_in_the_monitor_approves_the_oldest_pause(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    socket = f"sf-test-{uuid.uuid4().hex[:8]}"
    errors = tmp_path / "monitor.stderr"
    command = (
        f"cd {REPO} && env -u COLUMNS -u LINES {sys.executable} -m safactory.cli.main monitor "
        f"2>{errors}"
    )
    env = [f"SF_KAFKA_BOOTSTRAP={topics.kafka_bootstrap}", f"SF_TOPIC_PREFIX={topics.topic_prefix}"]
    settings_env = [arg for value in env for arg in ("-e", value)]
    _tmux(socket, "new-session", "-d", "-s", "m", "-x", "200", "-y", "50", *settings_env, command)

    def pane() -> str:
        return _tmux(socket, "capture-pane", "-p", "-t", "m").stdout

    try:
        assert await _until(lambda: " live " in pane(), 30), f"{pane()}\n{errors.read_text()}"
        pause = Control(
            episode_id="ep-held-7",
            command=ControlCommand.PAUSE,
            reason="high data_exfiltration",
            verdict_ids=["v-1"],
        )
        await producer.publish(pause)
        assert await _until(lambda: "paused for approval" in pane(), 10), pane()
        assert "ep-held-7" in pane()
        _tmux(socket, "send-keys", "-t", "m", "a")

        def answered() -> bool:
            shown = pane()  # empty if the monitor died: that is no answer
            return " live " in shown and "paused for approval" not in shown

        assert await _until(answered, 10), f"{pane()}\n{errors.read_text()}"
        _tmux(socket, "send-keys", "-t", "m", "q")
    finally:
        _tmux(socket, "kill-server")
    seen: list[Control] = []

    async def keep(d: Delivery) -> None:
        if isinstance(d.event, Control):
            seen.append(d.event)

    reader = EventConsumer(["control"], f"r-{uuid.uuid4().hex[:8]}", handler=keep, settings=topics)
    async with reader:
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            await reader.poll_once(timeout_ms=300)
    assert len(seen) == 2, f"control topic holds {seen}; monitor stderr:\n{errors.read_text()}"
    approval = seen[1]
    assert (approval.command, approval.episode_id) == (ControlCommand.RESUME, "ep-held-7")
    assert approval.decided_by == "person:monitor" and approval.verdict_ids == ["v-1"]
    assert "Traceback" not in errors.read_text()
