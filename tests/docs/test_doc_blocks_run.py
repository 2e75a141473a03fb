"""The docs run as written: every shell block of README.md and docs/*.md not marked
``parsed only`` or ``illustrative`` (tests/support/doc_blocks.py) runs line by line, as a
reader types it, in an empty folder holding only the files its ``given`` mark names, on the
real broker after ``safactory broker up`` (the catalogue's topics made under a prefix of the
block's own), with the default LanceDB folder (``./lancedb``) and the default ports.

How a line runs:

* one that starts a command that serves (a worker, the gateway, ``serve``, ``monitor``, the
  model server, the trainer, a simulation worker), or ends in ``&``, starts in the background
  as if in a terminal of its own, and must still run when the block ends (then it is
  interrupted) or have exited 0; the same command again (another way to run it) stops the
  earlier one first, as a reader trying both would;
* any other line must exit 0 within ``LINE_TIMEOUT_S``; one that asks reads ``ANSWERS``;
* ``export NAME=VALUE`` holds for the lines after it;
* a line holding a ``<placeholder>`` is left out (the reader fills it in).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from chats import ANSWERED, OBEYED
from doc_blocks import PLACEHOLDER, ROOT, Block, blocks, commands, lines

from safactory.infra.config import Settings
from safactory.infra.topics import create_topics, delete_topics_where

pytestmark = pytest.mark.integration

SERVES = {("worker",), ("gateway",), ("serve",), ("monitor",), ("model-server",), ("train",)}
SERVES |= {("simulate", "worker")}
"""Commands that run until stopped (their first words after ``safactory``)."""
LINE_TIMEOUT_S = 240.0
ALIVE_S = 8.0
"""A serving command must still run this long after its start (a start-up failure shows)."""
STOP_S = 20.0
ANSWERS = b"y\nq\n"
"""What a line that asks reads: yes to "run it?", then q (stop) to a queue."""


def given_files() -> dict[str, str | Callable[[Path], None]]:
    """What a reader is assumed to have, by name: a file (its text), a folder (what makes it
    in the block's folder), a ``$NAME`` variable (its value)."""
    plan = re.search(r"```json\n(.*?)```", (ROOT / "docs/DATAELF.md").read_text(), re.S)
    assert plan is not None, "docs/DATAELF.md shows its plan in a json block"
    return {
        "traces.jsonl": "".join(
            json.dumps({"id": name, "messages": chat}) + "\n"
            for name, chat in (("steered-mail", OBEYED), ("summary", ANSWERED))
        ),
        "labels.jsonl": json.dumps(
            {"id": "steered-mail", "label": "unsafe", "reason": "mailed a file to a stranger"}
        )
        + "\n",
        "risk_per_version.json": plan.group(1),
        "lancedb": a_sinks_lancedb,
        "$GATEWAY_TOKEN": "a-token-of-the-readers",
    }


@dataclass
class Running:
    """A serving command started in the background."""

    line: str
    key: tuple[str, ...]
    process: subprocess.Popen[bytes]
    log: Path
    started: float = field(default_factory=time.monotonic)

    def stop(self) -> str | None:
        """Interrupt it (after ``ALIVE_S``); what went wrong, or ``None``."""
        time.sleep(max(0.0, self.started + ALIVE_S - time.monotonic()))
        code = self.process.poll()
        if code is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
                return f"`{self.line}` did not stop within {STOP_S:g} s of an interrupt"
            return None
        return None if code == 0 else f"`{self.line}` exited {code} while it should serve"


def serving_key(line: str) -> tuple[str, ...] | None:
    """The words naming a serving command of ``line`` (``None``: the line runs to its end)."""
    for words in commands(line):
        if words[0] != "safactory":
            continue
        named = tuple(w for w in words[1:3] if not w.startswith("-"))
        for key in SERVES:
            if named[: len(key)] == key:
                return named
    return ("background", line) if line.rstrip().endswith("&") else None


def tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def a_sinks_lancedb(path: Path) -> None:
    """A LanceDB as the sink writes it: twelve episodes (every third unsafe), their steps,
    verdicts and trajectories."""
    from data_episodes import episode_events
    from deliveries import stored_as_the_sink

    stored_as_the_sink(path, [e for n in range(12) for e in episode_events(n, env="os")])


def run_block(block: Block, folder: Path, kafka: str) -> tuple[list[str], list[str]]:
    """Run ``block`` in ``folder``; returns (what failed, the topic prefixes it used)."""
    files = given_files()
    env = {k: v for k, v in os.environ.items() if k != "SF_LANCE_URI"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SF_KAFKA_BOOTSTRAP"] = kafka
    env["SF_TOPIC_PREFIX"] = f"doc{uuid.uuid4().hex[:8]}."
    env["SF_BROKER_WAIT_S"] = "10"
    for name in block.given:
        assert name in files, f"{block.where}: no given {name!r} (doc_blocks' marks)"
        made = files[name]
        if name.startswith("$"):
            env[name[1:]] = str(made)
        elif callable(made):
            made(folder / name)
        else:
            (folder / name).write_text(made, encoding="utf-8")
    asyncio.run(create_topics(Settings(kafka_bootstrap=kafka, topic_prefix=env["SF_TOPIC_PREFIX"])))
    prefixes = {env["SF_TOPIC_PREFIX"]}
    failed: list[str] = []
    running: list[Running] = []
    try:
        for n, line in enumerate(x for x in lines(block.text) if not PLACEHOLDER.search(x)):
            prefixes |= set(re.findall(r"SF_TOPIC_PREFIX=(\S+)", line))
            if line.startswith("export "):
                name, _, value = shlex.split(line)[1].partition("=")
                env[name] = value
                continue
            log = folder / f"line{n}.log"
            key = serving_key(line)
            if key is None:
                failed += _one_shot(line, folder, env, log)
                continue
            for earlier in [r for r in running if r.key == key]:
                running.remove(earlier)
                problem = earlier.stop()
                if problem:
                    failed.append(f"{problem}:\n{tail(earlier.log)}")
            with log.open("wb") as out:  # the child holds its own copy
                process = subprocess.Popen(
                    ["bash", "-c", line.rstrip().removesuffix("&")],
                    cwd=folder,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            running.append(Running(line, key, process, log))
    finally:
        for r in running:
            problem = r.stop()
            if problem:
                failed.append(f"{problem}:\n{tail(r.log)}")
    return failed, sorted(prefixes)


def _one_shot(line: str, folder: Path, env: dict[str, str], log: Path) -> list[str]:
    with log.open("wb") as out:
        try:
            done = subprocess.run(
                ["bash", "-c", line],
                cwd=folder,
                env=env,
                input=ANSWERS,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=LINE_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return [f"`{line}` still ran after {LINE_TIMEOUT_S:g} s:\n{tail(log)}"]
    return [] if done.returncode == 0 else [f"`{line}` exited {done.returncode}:\n{tail(log)}"]


RUN = [b for b in blocks() if b.runs]


@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_the_block_runs_as_written(block: Block, tmp_path: Path, kafka: str) -> None:
    failed, prefixes = run_block(block, tmp_path, kafka)
    with contextlib.suppress(Exception):
        asyncio.run(
            delete_topics_where(
                Settings(kafka_bootstrap=kafka), lambda t: t.startswith(tuple(prefixes))
            )
        )
    assert not failed, f"{block.where}:\n" + "\n".join(failed)
