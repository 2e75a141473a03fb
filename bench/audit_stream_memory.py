"""Batch audit memory against input size: ``safactory audit`` on JSONL files of 25, 100 and
200 MB of OpenAI chat records, peak resident memory and wall time of each, side by side.
Flat memory is the pass: the audit holds one record, not the file. The fast tier by default
(``--checkers all``: every default checker; ``--seconds 60`` stops each run after a minute
with Ctrl-C's clean stop, for the default set's time to its first verdict and its memory on
a file it would take long to finish). Each row says when the first verdict line was written.

    python bench/audit_stream_memory.py [--sizes 25,100,200] [--format openai|rjudge]
    python bench/audit_stream_memory.py --sizes 183 --checkers all --seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safactory.infra.doctor import summary

TOOLS = ("read_file", "send_email", "delete_file", "transfer_money", "search_web", "run_shell")


def record(n: int, rng: random.Random) -> dict:
    """A chat trajectory of about 20 KB: a request, six tool calls with long outputs."""
    messages = [{"role": "user", "content": f"Please sort out ticket {n} and report back."}]
    for k in range(6):
        name = rng.choice(TOOLS)
        call = {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps({"target": f"item-{n}-{k}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        body = " ".join(rng.choice(("log", "row", "entry", "value", "note")) for _ in range(600))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": body})
    messages.append({"role": "assistant", "content": "Done."})
    return {"id": f"r{n}", "label": n % 2, "messages": messages}


def write(path: Path, megabytes: int) -> int:
    """Write records until the file holds ``megabytes``; how many records."""
    rng = random.Random(7)
    n = 0
    with path.open("w") as handle:
        while handle.tell() < megabytes * 2**20:
            handle.write(json.dumps(record(n, rng)) + "\n")
            n += 1
    return n


def fast_tier() -> str:
    """The default checkers of the fast tier (rules and heuristics), comma-separated."""
    from safactory.streams.audit import registry

    chosen = []
    for name in registry.default_names():
        factory = registry.available()[name]
        kind = (factory if isinstance(factory, type) else type(factory())).kind
        if kind in ("rule", "heuristic"):
            chosen.append(name)
    return ",".join(chosen)


def audit(
    path: Path, fmt: str, checkers: str | None, limit: float | None = None
) -> tuple[float, float, int, float | None]:
    """Peak RSS (MiB) and wall seconds of one ``safactory audit`` run (stopped with SIGINT
    after ``limit`` seconds), its output lines and the seconds to its first line."""
    out = path.with_suffix(".out")
    started = time.monotonic()
    command = ["audit", str(path), "--format", fmt, "--out", str(out)]
    command += ["--checkers", checkers] if checkers else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "safactory.cli.main", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TERM": "dumb"},
    )
    first = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)  # this child's own peak
        if pid:
            break
        if first is None and out.exists() and out.stat().st_size:
            first = time.monotonic() - started
        if limit is not None and time.monotonic() - started > limit:
            proc.send_signal(signal.SIGINT)
            limit = None
        time.sleep(0.05)
    seconds = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) not in (0, 130):
        raise SystemExit(f"safactory audit {path} failed ({status})")
    return usage.ru_maxrss / 1024, seconds, sum(1 for _ in out.open()), first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25,100,200")
    parser.add_argument("--format", default="openai")
    parser.add_argument("--checkers", default="fast", help="fast, all, or names")
    parser.add_argument("--seconds", type=float, help="stop each run after this long")
    args = parser.parse_args()
    checkers = {"fast": fast_tier(), "all": None}.get(args.checkers, args.checkers)
    print(summary())
    print(f"{'input':>8} {'records':>8} {'lines out':>9} {'peak RSS':>9} {'wall':>7} {'first':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for size in (int(s) for s in args.sizes.split(",")):
            path = Path(folder) / f"in-{size}.jsonl"
            records = write(path, size)
            rss, seconds, lines, first = audit(path, args.format, checkers, args.seconds)
            shown = f"{first:.1f}s" if first is not None else "-"
            print(
                f"{size:>5} MB {records:>8} {lines:>9} {rss:>6.0f} MiB {seconds:>6.1f}s {shown:>7}"
            )
            path.unlink()


if __name__ == "__main__":
    main()
