"""``safactory model-server`` as a real process for tests: start, wait for it, stop."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

_COMMAND = (sys.executable, "-m", "safactory.cli.main", "model-server")


@contextlib.contextmanager
def model_server(
    source: Path, name: str, log: Path, *extra: str, token: str | None = None
) -> Iterator[str]:
    """Run the server on ``source`` on a free port, its output in ``log`` (with ``token``:
    every request must carry it); yields its base URL (no ``/v1``) once it answers."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    with log.open("w") as out:
        process = subprocess.Popen(
            [*_COMMAND, str(source), *extra, "--port", "0", "--name", name]
            + (["--token", token] if token else []),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        deadline = time.monotonic() + 120
        base = None
        while time.monotonic() < deadline:
            assert process.poll() is None, f"model server exited: {log.read_text()}"
            found = re.search(r"http://([\d.]+:\d+)/v1", log.read_text())
            if found:
                base = f"http://{found[1]}"
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/health", headers=headers, timeout=2).status_code == 200:
                        break
            time.sleep(0.2)
        assert base is not None, f"model server did not start: {log.read_text()}"
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
