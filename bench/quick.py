"""The headline figures in under a minute, each beside the one recorded in bench/baseline.json.

    python bench/quick.py             # one table; a figure 30 % worse than its baseline says so
    python bench/quick.py --record    # measure three times, write the medians as the baseline
    python bench/quick.py --strict    # exit 1 when a figure regressed

The baseline is kept per CPU class (``safactory doctor``: AVX-512 with AMX, AVX-512, AVX2,
...; a run capped with ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` is AVX2): a figure
is compared only with one recorded on the same class, and the table names the class and the
compute path each model took.

Against the broker at ``SF_KAFKA_BOOTSTRAP`` (one is started under ``SF_HOME`` if nothing
answers, and stopped again). Each figure is a short version of its bench (the full ones,
with their spreads, are in docs/BENCHMARKS.md), so a quick figure moves more run to run than
the recorded one: the 30 % margin is for that, and a figure past it is a regression to fix
or explain before an issue is resolved.

Figures (the bench each is a short run of; higher or lower is better):

* bus produce / consume / pipelined, ours ÷ raw aiokafka + json: ``bus.py``, 10,000 events;
  higher;
* streaming audit p99 at 2,000 steps/s, fast tier: ``audit_latency.py``, the median of
  three 4 s windows on one worker; lower;
* per-step audit p99, full offline set: ``audit_latency.py`` part 1, 200 steps; lower;
* sink ÷ raw LanceDB append: ``sink_ingest.py``, 10,000 rows; higher;
* OS-shell steps/s at concurrency 32: ``sim_throughput.py``, 256 episodes; higher;
* batch audit of 120 R-Judge traces, the CLI from its start (s): ``safactory audit``; lower.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path


def _this_checkout() -> None:
    """Make ``safactory`` this checkout's code: a cached environment may still point at
    another clone (one since deleted, or another engineer's), and the figures would be that
    code's. Repoint it as bootstrap.sh does, then start again."""
    root = Path(__file__).resolve().parents[1]
    try:
        import safactory.infra

        if Path(safactory.infra.__file__).resolve().parent == root / "infra":
            return
    except ImportError:
        pass
    if os.environ.get("SF_QUICK_REPOINTED"):
        raise SystemExit(f"quick.py: cannot import safactory from {root}; run bootstrap.sh")
    print(f"quick.py: pointing {sys.prefix} at {root}", file=sys.stderr)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-e", str(root)], check=True)
    os.environ["SF_QUICK_REPOINTED"] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])


_this_checkout()

from safactory.infra.config import Settings  # noqa: E402

BASELINE = Path(__file__).with_name("baseline.json")
REGRESSION = 0.30
"""A figure this much worse than its baseline is a regression."""
RECORD_RUNS = 3
"""Runs whose median ``--record`` writes."""
STEPS = 200
"""Steps of the per-step audit figure (at 60 its p99 was the slowest step's time)."""
RJUDGE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "audit" / "trajectories" / "rjudge"
)


@dataclass(frozen=True)
class Figure:
    """One headline figure and how to measure it."""

    name: str
    unit: str
    higher_is_better: bool
    measure: Callable[[Settings], dict[str, float]]
    """Returns this figure's value (and, for one bench, its siblings' too)."""


def bus(settings: Settings) -> dict[str, float]:
    from safactory.bench.bus import headline

    ratios = asyncio.run(headline(settings.kafka_bootstrap, 10_000))
    return {f"bus {k} / raw+json": v for k, v in ratios.items()}


def audit_stream(settings: Settings) -> dict[str, float]:
    from safactory.bench import audit_latency as al
    from safactory.infra import aio

    checkers = ",".join(
        n
        for n, f in al.registry.available().items()
        if isinstance(f, type) and f.kind in al.FAST_KINDS
    )
    from safactory.bench.bus import drop_topics

    topics, worker = al.start_worker(checkers)
    p99s = []
    try:  # three 4 s windows on one worker: a host's noisy spell spoils one, not the figure
        for window in range(STREAM_WINDOWS):
            got = aio.run(
                al.part2(topics, worker, al.DEFAULT_DATA, 2000, 4.0, checkers, window=window)
            )
            p99s.append(got["p99_ms"])
    finally:
        al.stop_worker(worker)
        asyncio.run(drop_topics(topics))
    print(f"  audit stream p99 of each window (ms): {' '.join(f'{v:.0f}' for v in p99s)}")
    return {"audit stream p99 at 2,000/s": statistics.median(p99s)}


STREAM_WINDOWS = 3
"""Timed windows of the streaming audit (the figure is their median p99)."""


def audit_step(settings: Settings) -> dict[str, float]:
    from safactory.bench import audit_latency as al

    p99 = al.part1(al.DEFAULT_DATA, STEPS, per_checker=False)
    return {"audit per-step p99, full set": p99["full offline set"]}


def sink(settings: Settings) -> dict[str, float]:
    from safactory.bench.sink_ingest import sink_ratio

    return {"sink / raw append": sink_ratio(10_000)}


def os_shell(settings: Settings) -> dict[str, float]:
    from safactory.bench.bus import drop_topics
    from safactory.bench.sim_throughput import level
    from safactory.infra.producer import EventProducer
    from safactory.infra.topics import create_topics

    async def run() -> float:
        topics = Settings(
            kafka_bootstrap=settings.kafka_bootstrap, topic_prefix=f"quick{uuid.uuid4().hex[:6]}."
        )
        await create_topics(topics)
        async with EventProducer(topics) as producer:
            _, steps, wall, _ = await level(producer, "os", 32, 256)
        await drop_topics(topics)
        return steps / wall

    return {"OS-shell steps/s at 32": asyncio.run(run())}


def batch_audit(settings: Settings) -> dict[str, float]:
    traces = []
    for path in sorted(RJUDGE.glob("*.json")):
        traces += json.loads(path.read_text())[:20]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "traces.json"
        data.write_text(json.dumps(traces))
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "safactory.cli.main",
                "audit",
                str(data),
                "--format",
                "rjudge",
                "--out",
                str(Path(tmp) / "v.jsonl"),
                "--db",
                str(Path(tmp) / "db"),
            ],
            check=True,
            capture_output=True,
        )
        return {f"batch audit of {len(traces)} traces (s)": time.perf_counter() - started}


FIGURES = [
    Figure("bus produce / raw+json", "×", True, bus),
    Figure("bus consume / raw+json", "×", True, bus),
    Figure("bus pipelined / raw+json", "×", True, bus),
    Figure("audit stream p99 at 2,000/s", "ms", False, audit_stream),
    Figure("audit per-step p99, full set", "ms", False, audit_step),
    Figure("sink / raw append", "×", True, sink),
    Figure("OS-shell steps/s at 32", "steps/s", True, os_shell),
    Figure("batch audit of 120 traces (s)", "s", False, batch_audit),
]


def machine_ms(runs: int = 5) -> float:
    """Milliseconds a fixed pure-Python loop takes (the median of ``runs``): how fast this
    machine runs Python now, to read the CPU-bound figures against (a shared machine has
    spells some 30 % slower, and every such figure moves with them)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def io_stalled_us() -> int | None:
    """Microseconds every task of this machine stalled on I/O so far (Linux PSI,
    ``/proc/pressure/io``, "full"); None where the kernel does not say."""
    try:
        for line in Path("/proc/pressure/io").read_text().splitlines():
            if line.startswith("full"):
                return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def machine_line(
    now: float, base: float | None, io_share: float | None, base_io: float | None
) -> str:
    """The machine's Python speed and I/O stalls in this run, beside the baseline's."""
    speed = (
        f"the reference loop took {now:.0f} ms, {base:.0f} ms when the baseline was recorded "
        f"({now / base:.2f}x: CPU-bound figures move with that)"
        if base
        else f"the reference loop took {now:.0f} ms (no baseline)"
    )
    stalls = (
        f"; all tasks stalled on I/O {io_share:.0%} of the run"
        + (f" ({base_io:.0%} in the baseline's)" if base_io is not None else "")
        + " (a figure that loads models or writes files moves with that)"
        if io_share is not None
        else ""
    )
    return f"machine: {speed}{stalls}"


def measure(settings: Settings) -> tuple[dict[str, float], dict[str, float]]:
    """Every figure (each bench once) and the seconds each bench took."""
    values: dict[str, float] = {}
    took: dict[str, float] = {}
    for figure in FIGURES:
        if figure.name in values:
            continue
        started = time.perf_counter()
        values.update(figure.measure(settings))
        took[figure.name] = time.perf_counter() - started
    return values, took


def table(values: dict[str, float], baseline: dict[str, dict[str, float | str]]) -> tuple[str, int]:
    """The side-by-side table and how many figures regressed."""
    lines = [f"{'figure':<32}{'now':>12}{'baseline':>12}{'now/base':>10}  verdict"]
    regressed = 0
    for figure in FIGURES:
        now = values[figure.name]
        base = baseline.get(figure.name, {}).get("value")
        if not isinstance(base, int | float) or not base:
            lines.append(f"{figure.name:<32}{now:>12.3g}{'-':>12}{'-':>10}  no baseline")
            continue
        ratio = now / base
        worse = ratio < 1 - REGRESSION if figure.higher_is_better else ratio > 1 + REGRESSION
        regressed += worse
        verdict = "REGRESSION (>30 % worse)" if worse else "ok"
        lines.append(f"{figure.name:<32}{now:>12.3g}{base:>12.3g}{ratio:>10.2f}  {verdict}")
    return "\n".join(lines), regressed


def _reachable(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def a_broker(settings: Settings) -> Iterator[None]:
    """The broker at ``settings``, or, if none answers there, a local one for the block."""
    if _reachable(settings.kafka_bootstrap):
        yield
        return
    from safactory.infra.local import local_broker

    broker = local_broker(settings)
    broker.up()
    try:
        yield
    finally:
        broker.down()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write the figures as the baseline")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a figure regressed")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    settings = Settings()
    started = time.perf_counter()
    stalled = io_stalled_us()
    speed = [machine_ms()]
    with a_broker(settings):
        values, took = measure(settings)
        if args.record:  # a baseline is the median of three runs: one short run moves
            more = [measure(settings)[0] for _ in range(RECORD_RUNS - 1)]
            values = {k: statistics.median([v, *(m[k] for m in more)]) for k, v in values.items()}
    speed.append(machine_ms())
    from safactory.infra.compute import cpu_class
    from safactory.infra.doctor import summary

    cpu = cpu_class()
    classes = json.loads(BASELINE.read_text()).get("classes", {}) if BASELINE.exists() else {}
    recorded = classes.get(cpu["class"], {})
    text, regressed = table(values, recorded.get("figures", {}))
    print(text)
    print(summary())
    if not recorded:
        print(
            f"another CPU class: bench/baseline.json has {sorted(classes) or 'none'}, not "
            f"{cpu['class']}; --record adds this one"
        )
    wall = time.perf_counter() - started
    now_stalled = io_stalled_us()
    io_share = (
        (now_stalled - stalled) / 1e6 / wall
        if stalled is not None and now_stalled is not None
        else None
    )
    print(
        machine_line(
            statistics.mean(speed),
            recorded.get("machine_ms"),
            io_share,
            recorded.get("io_stalled_share"),
        )
    )
    spent = ", ".join(f"{name.split(' ')[0]} {s:.0f}s" for name, s in took.items())
    print(f"\n{time.perf_counter() - started:.0f} s in all ({spent})")
    if args.record:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
        ).stdout.strip()
        classes[str(cpu["class"])] = {
            "cpu": {k: cpu[k] for k in ("model", "flags", "caps", "cores")},
            "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": commit,
            "machine_ms": round(statistics.mean(speed), 1),
            "io_stalled_share": None if io_share is None else round(io_share, 3),
            "figures": {
                f.name: {
                    "value": round(values[f.name], 4),
                    "unit": f.unit,
                    "higher_is_better": f.higher_is_better,
                }
                for f in FIGURES
            },
        }
        BASELINE.write_text(json.dumps({"classes": classes}, indent=2) + "\n")
        print(f"baseline written to {BASELINE}")
    if regressed:
        print(f"{regressed} figure(s) more than 30 % worse than bench/baseline.json")
    return 1 if regressed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
