"""The README's main command on a cold page cache, N times: the first run a new user makes.

Each run stops the local broker, evicts the page cache of the virtualenv, the models, the
Kafka jars and the broker's data (``bench/cold_cache.py``), then runs
``bash infra/scripts/demo.sh`` and records its wall time, its exit status, the headline
line and, from the workers' logs, the longest event-loop stall and any rebalance or exit.

    python bench/cold_demo.py --runs 3 [demo options, e.g. --model tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from safactory.bench.cold_cache import evict

ROOT = Path(__file__).resolve().parents[1]
HOME = Path(os.environ.get("SF_HOME", Path.home() / ".cache" / "safactory"))
STALL = re.compile(r"event loop held for ([\d.]+) s")
REBALANCED = re.compile(r"commit refused, the group rebalanced")
WORKDIR = re.compile(r"workdir\s+(\S+)")


def cold() -> int:
    """Stop the broker and evict what a fresh machine would read from disk; bytes evicted."""
    subprocess.run(
        [sys.executable, "-m", "safactory.cli.main", "broker", "down"],
        capture_output=True,
        check=False,
    )
    roots = [Path(sys.prefix), HOME, Path.home() / ".m2"]
    return evict([r for r in roots if r.exists()])[1]


def logs_of(output: str) -> dict[str, object]:
    """Loop stalls and rebalances the run's workers logged."""
    found = WORKDIR.search(output.replace("\n", " "))
    stalls: dict[str, float] = {}
    rebalances: dict[str, int] = {}
    if found:
        for log in (Path(found.group(1)) / "logs").glob("*.log"):
            text = log.read_text(errors="replace")
            held = [float(m) for m in STALL.findall(text)]
            if held:
                stalls[log.stem] = max(held)
            if REBALANCED.search(text):
                rebalances[log.stem] = len(REBALANCED.findall(text))
    return {"longest_stall_s": stalls, "rebalanced_commits": rebalances}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args, demo_args = parser.parse_known_args()
    results = []
    for run in range(1, args.runs + 1):
        evicted = cold()
        started = time.monotonic()
        proc = subprocess.run(
            ["bash", "infra/scripts/demo.sh", *demo_args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        output = proc.stdout + proc.stderr
        headline = [line for line in output.splitlines() if "unsafe-action" in line]
        result = {
            "run": run,
            "files_evicted_mib": round(evicted / 2**20),
            "exit": proc.returncode,
            "seconds": round(seconds),
            "headline": headline[-1].strip() if headline else None,
            **logs_of(output),
        }
        if proc.returncode:
            result["tail"] = output.splitlines()[-12:]
        results.append(result)
        print(json.dumps(result), flush=True)
    passed = sum(r["exit"] == 0 for r in results)
    print(
        f"cold demo: {passed} of {len(results)} passed; seconds "
        + ", ".join(str(r["seconds"]) for r in results)
    )


if __name__ == "__main__":
    main()
