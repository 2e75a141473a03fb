"""A fleet of worker processes (``safactory demo``'s, the benchmarks'): real
``safactory`` commands, one log file each.

Every worker is started as a subprocess in its own session (a Ctrl-C at the terminal
reaches only the process that started them, which then stops the workers in order), with
stdout and stderr going to ``<workdir>/logs/<name>.log``. Stopping sends SIGINT (each
worker finishes the work in hand, commits and exits), then SIGKILL to any that outlive the
grace period.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b.*")
"""A Python exception line (``aiokafka.errors.CommitFailedError: ...``)."""


class FleetError(RuntimeError):
    """A worker exited, or a stage waiting on the fleet did not produce what it should; the
    message names the log."""


@dataclass
class Worker:
    """One running ``safactory`` command."""

    name: str
    args: list[str]
    log: Path
    process: subprocess.Popen[bytes]
    handle: IO[bytes] = field(repr=False)

    @property
    def command(self) -> str:
        """The command line as a user would type it."""
        return "safactory " + shlex.join(self.args)

    def tail(self, lines: int = 15) -> str:
        """The last lines of the worker's log."""
        return "\n".join(self._lines()[-lines:])

    def why(self) -> str:
        """The line that says why the worker ended: its last exception line, else its last
        error line, else its last line."""
        lines = [line.strip() for line in self._lines() if line.strip()]
        for pattern in (_RAISED, re.compile(r".*\b(?:ERROR|CRITICAL|error:)")):
            found = [line for line in lines if pattern.match(line)]
            if found:
                return found[-1]
        return lines[-1] if lines else "(its log is empty)"

    def _lines(self) -> list[str]:
        try:
            return self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []


class Fleet:
    """Starts workers with a shared environment; stops them all on :meth:`stop`."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.workers: dict[str, Worker] = {}
        self.stopped: set[str] = set()
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> Worker:
        """Run ``safactory ARGS`` in the background, logging to ``<log_dir>/<name>.log``
        (``env`` adds to the fleet's environment)."""
        log = self.log_dir / f"{name}.log"
        handle = log.open("wb")
        handle.write(f"$ safactory {shlex.join(args)}\n".encode())
        handle.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", "safactory.cli.main", *args],
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**self.env, **(env or {})},
            start_new_session=True,
        )
        worker = Worker(name, args, log, process, handle)
        self.workers[name] = worker
        return worker

    def check(self) -> None:
        """Raise :class:`FleetError` if a worker exited (they all run until stopped)."""
        for worker in self.workers.values():
            if worker.name in self.stopped:
                continue
            code = worker.process.poll()
            if code is not None:
                raise FleetError(
                    f"worker {worker.name!r} exited with code {code}: {worker.why()}\n"
                    f"  command: {worker.command}\n  log: {worker.log}\n{worker.tail()}"
                )

    def stop(self, names: list[str] | None = None, grace_s: float = 30.0) -> list[str]:
        """SIGINT the named workers (default: all, newest first), wait, SIGKILL stragglers.

        Returns the names of workers that had to be killed.
        """
        chosen = [self.workers[n] for n in (names or reversed(list(self.workers)))]
        chosen = [w for w in chosen if w.name not in self.stopped]
        self.stopped.update(w.name for w in chosen)
        for worker in chosen:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + grace_s
        killed = []
        for worker in chosen:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(worker.process.pid, signal.SIGKILL)
                worker.process.wait()
                killed.append(worker.name)
            worker.handle.close()
        return killed
