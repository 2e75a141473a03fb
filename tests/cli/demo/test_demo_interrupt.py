"""Stopping the demo with SIGTERM (a kill, a CI timeout) or SIGHUP (a closed terminal)
stops its workers too: they run in sessions of their own, so before, the signal ended the
demo alone and left five workers running (found by killing a demo run by hand)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def _processes_of(workdir: Path) -> set[int]:
    """Pids whose environment names ``workdir`` (every worker's ``SF_HOME`` lies in it)."""
    found = set()
    needle = str(workdir).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.add(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_stops_the_demo_and_every_worker(kafka: str, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    out = tmp_path / "demo.out"
    with out.open("wb") as sink:
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "safactory.cli.main",
                "demo",
                "--model",
                "tiny",
                "--episodes",
                "8",
                "--rounds",
                "3",
                "--workdir",
                str(workdir),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 180
            while b"workers:" not in out.read_bytes():
                assert demo.poll() is None, out.read_text()[-3000:]
                assert time.monotonic() < deadline, out.read_text()[-3000:]
                time.sleep(0.5)
            workers = _processes_of(workdir) - {demo.pid}
            assert len(workers) >= 5, workers  # audit, assemble, sink, train, simulate
            demo.send_signal(signal.SIGTERM)
            code = demo.wait(timeout=90)
        finally:
            if demo.poll() is None:
                demo.kill()
    assert code == 130, out.read_text()[-3000:]
    assert "interrupted; workers stopped" in out.read_text()
    assert _processes_of(workdir) == set()
