"""Audit latency: per-step cost of the checkers on one core, and step→verdict latency
through the real broker with `safactory worker audit` running.

    python bench/audit_latency.py --data ../shared/data/audit [--steps 200] [--rate 2000]

Part 1 times the engine in-process on real steps (R-Judge and AgentDojo) with torch on one
thread: p50 / p99 per step for the full offline set and for the fast tier (rules and
heuristics), and p50 / p99 of each checker alone. Per-text caches (embeddings, injection
cues) start empty at each episode and stay warm across its steps (as in a live worker), so
no text is reused from another episode. Part 2 starts the worker as a subprocess
on fresh topics, publishes steps at ``--rate`` per second for ``--warmup`` seconds (not
counted: a broker just started is still compiling its hot paths) and then for ``--seconds``,
and measures from each of those steps' ``produced_at`` to the arrival of its summary verdict
at a consumer that reads ``sf.verdicts`` concurrently with the sender (an earlier version
stamped arrivals only when the sender paused to drain, which added up to a second at low
rates).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from safactory.bench.bus import drop_topics
from safactory.infra import aio
from safactory.infra.config import Settings
from safactory.infra.reader import TopicReader
from safactory.schemas import codec
from safactory.streams.audit import provenance, registry
from safactory.streams.audit.engine import SUMMARY_CHECKER, AuditEngine
from safactory.streams.audit.view import EpisodeView
from safactory.tools.importers import read_records

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "audit"
FAST_KINDS = ("rule", "heuristic")
SEND_TICK_S = 0.005
WARMUP_S = 3.0
"""Seconds at the offered rate before the timed ones (not counted): a broker's JVM that has
just started compiles its hot paths under the first load (a first 20 s run right after a
broker start read p99 994 ms, the next two 224 and 137 ms), and a worker's caches fill."""
WINDOW_S = 2.0
"""The p99 is also printed per window of this many seconds: a stall shows as one bad window."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def sample_episodes(data: Path, steps_wanted: int) -> list[list]:
    """Whole episodes (so context is real) from both formats, about ``steps_wanted`` steps."""
    episodes = []
    rj = read_records(data / "trajectories/rjudge", "rjudge")
    ad = read_records(data / "trajectories/agentdojo", "agentdojo")
    total = 0
    for a, b in zip(rj[::7], ad[::13], strict=False):
        for record in (a, b):
            episodes.append(record.steps)
            total += len(record.steps)
        if total >= steps_wanted:
            break
    return episodes


async def per_step(
    engine: AuditEngine, episodes: list[list], *, per_checker: bool = True
) -> tuple[list[float], dict]:
    """Engine time per step, and each checker's own time (each checker alone over the
    episodes). Embedding caches are emptied at the start of every episode and stay warm across
    its steps, as the worker's process-wide cache does in a live stream: a text is reused only
    within its own episode, never from another one."""
    totals: list[float] = []
    for steps in episodes:
        _clear_caches(engine)
        for i, step in enumerate(steps):
            started = time.perf_counter()
            await engine.audit_step(step, steps[:i])
            totals.append((time.perf_counter() - started) * 1000)
    by_checker: dict[str, list[float]] = {c.name: [] for c in engine.checkers}
    for checker in engine.checkers if per_checker else ():
        for steps in episodes:
            _clear_caches(engine)
            for i, step in enumerate(steps):
                t0 = time.perf_counter()
                view = EpisodeView(step, steps[:i])
                checker.prepare(view)
                result = checker.check(view)
                if asyncio.iscoroutine(result):
                    result.close()
                by_checker[checker.name].append((time.perf_counter() - t0) * 1000)
    return totals, by_checker


def _clear_caches(engine: AuditEngine) -> None:
    """Forget every per-text result: embeddings and the text-keyed signal caches (tool-name
    caches stay: a stream sees the same few tools all the time)."""
    for checker in engine.checkers:
        embedder = getattr(checker, "embedder", None)
        if embedder is not None:
            embedder.clear_cache()
    for cached in (
        provenance.injection_cue_score,
        provenance.instructions,
        provenance.chunks,
        provenance.entities,
        provenance.asked_classes,
    ):
        cached.cache_clear()


def part1(data: Path, steps: int, *, per_checker: bool = True) -> dict[str, float]:
    """Engine time per step; returns the p99 (ms) of the full offline set and the fast tier."""
    import torch

    torch.set_num_threads(1)
    episodes = sample_episodes(data, steps)
    n = sum(len(e) for e in episodes)
    full = AuditEngine(registry.create())
    fast = AuditEngine([c for c in registry.create() if c.kind in FAST_KINDS])
    asyncio.run(full.audit_step(episodes[0][0]))  # load the model, warm caches
    print(
        f"part 1: {n} real steps in {len(episodes)} episodes, torch on 1 thread, per-text "
        f"caches emptied at each episode's start, pid {os.getpid()}"
    )
    p99: dict[str, float] = {}
    for label, engine in (("full offline set", full), ("fast tier (rules+heuristics)", fast)):
        totals, checkers = asyncio.run(per_step(engine, episodes, per_checker=per_checker))
        p99[label] = pct(totals, 0.99)
        print(
            f"  {label:<30} {len(engine.checkers):>2} checkers  p50 {pct(totals, 0.5):7.2f} ms"
            f"  p99 {pct(totals, 0.99):7.2f} ms  mean {statistics.mean(totals):7.2f} ms"
        )
        if engine is full:
            for name, values in sorted(checkers.items(), key=lambda kv: -pct(kv[1], 0.99)):
                print(
                    f"      {name:<36} p50 {pct(values, 0.5):7.2f}  p99 {pct(values, 0.99):7.2f} ms"
                )
    return p99


def start_worker(checkers: str) -> tuple[Settings, subprocess.Popen[bytes]]:
    """Fresh topics under a unique prefix, and the worker running on them."""
    from safactory.infra.topics import create_topics

    settings = Settings(topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
    asyncio.run(create_topics(settings))
    home = Path(f"/tmp/sf-bench-{uuid.uuid4().hex[:6]}")
    env = {**os.environ, "SF_TOPIC_PREFIX": settings.topic_prefix, "SF_HOME": str(home)}
    with open(home.with_suffix(".log"), "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "safactory.cli.main", "worker", "audit", "--checkers", checkers],
            env=env,
            stdout=log,
            stderr=log,
        )
    return settings, worker


def stop_worker(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM once (a second one makes the worker exit at once) and wait for it."""
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


async def part2(
    settings: Settings,
    worker: subprocess.Popen[bytes],
    data: Path,
    rate: int,
    seconds: float,
    checkers: str,
    warmup_s: float = WARMUP_S,
    window: int = 0,
) -> dict[str, float]:
    """Step → summary verdict latency through the broker and the worker at ``rate``, over
    the ``seconds`` that follow ``warmup_s`` seconds at the same rate (not counted);
    ``window`` numbers a run on the same worker (its steps and episodes are new ones)."""
    from safactory.infra.producer import EventProducer

    consumer = TopicReader(settings, "bench-verdicts", fetch_wait_ms=20, committed_only=False)
    await consumer.start()
    await consumer.open(await consumer.partitions([settings.topic("verdicts")], wait_s=30))
    episodes = sample_episodes(data, 400)
    template = [s for e in episodes for s in e]
    arrivals = Arrivals()
    sent: dict[str, float] = {}
    receiver = asyncio.create_task(_receive(consumer, arrivals))
    try:
        async with EventProducer(settings) as producer:
            # warm-up: wait until the worker answers one step
            probe = template[0].model_copy(update={"episode_id": "warmup", "event_id": "warm"})
            await producer.publish(probe)
            await arrivals.wait_for({"warm"}, 120)
            warm = int(rate * warmup_s)
            total = int(rate * seconds)
            interval = 1.0 / rate
            start = measured = time.perf_counter()
            for i in range(warm + total):
                base = template[i % len(template)]
                step = base.model_copy(
                    update={
                        "episode_id": f"{base.episode_id}-{window}-{i // len(template)}",
                        "event_id": f"{window}s{i}" if i >= warm else f"{window}w{i}",
                        "produced_at": time.time(),
                    }
                )
                if i == warm:
                    measured = time.perf_counter()
                if i >= warm:
                    sent[step.event_id] = step.produced_at
                await producer.send(step)
                # Steps leave in 5 ms ticks (10 at a time at 2,000/s), each stamped as it is
                # sent: a sleep per step cost this process (on the worker's 2 cores) 2,000
                # wake-ups and produce requests a second.
                delay = start + (i + 1) * interval - time.perf_counter()
                if delay > SEND_TICK_S:
                    await asyncio.sleep(delay)
            await producer.flush()
            send_s = time.perf_counter() - measured
            await arrivals.wait_for(set(sent), 120)
    finally:
        receiver.cancel()
        await consumer.stop()
    at = arrivals.times
    latencies = [(at[k] - t) * 1000 for k, t in sent.items() if k in at]
    done = len(latencies)
    print(
        f"part 2: {total} steps offered at {rate}/s after {warm} warm-up steps (sent in "
        f"{send_s:.1f}s = {total / send_s:.0f}/s), checkers: {checkers}"
    )
    print(
        f"  verdicts received for {done}/{total} steps; step→verdict p50 "
        f"{pct(latencies, 0.5):.0f} ms  p99 {pct(latencies, 0.99):.0f} ms  max "
        f"{max(latencies, default=float('nan')):.0f} ms"
    )
    windows: dict[int, list[float]] = {}
    first = min(sent.values(), default=0.0)
    for k, t in sent.items():
        if k in at:
            windows.setdefault(int((t - first) // WINDOW_S), []).append((at[k] - t) * 1000)
    print(
        f"  p99 of each {WINDOW_S:g} s of sending (ms): "
        + " ".join(f"{pct(windows[w], 0.99):.0f}" for w in sorted(windows))
    )
    return {"answered": done / total, "p50_ms": pct(latencies, 0.5), "p99_ms": pct(latencies, 0.99)}


class Arrivals:
    """When each step's summary verdict arrived; lets the sender wait for a set of them."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self._changed = asyncio.Event()

    def add(self, step_id: str, at: float) -> None:
        self.times.setdefault(step_id, at)
        self._changed.set()

    async def wait_for(self, step_ids: set[str], timeout_s: float) -> None:
        """Return once all of ``step_ids`` arrived, or after ``timeout_s``."""
        deadline = time.perf_counter() + timeout_s
        while not step_ids <= self.times.keys() and time.perf_counter() < deadline:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), deadline - time.perf_counter())
            except TimeoutError:
                return


async def _receive(consumer: TopicReader, arrivals: Arrivals) -> None:
    """Stamp each summary verdict with its arrival time, concurrently with the sender."""
    while True:
        records = await consumer.read(timeout_ms=100)
        now = time.time()
        for message in records:
            verdict = codec.decode(message.value, message.headers)
            if verdict.checker == SUMMARY_CHECKER:
                arrivals.add(verdict.source_event_id, now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data/audit folder")
    parser.add_argument("--steps", type=int, default=200, help="steps timed in part 1")
    parser.add_argument("--rate", type=int, default=2000, help="steps per second offered (part 2)")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long to offer them")
    parser.add_argument(
        "--stream-checkers",
        default=",".join(
            n
            for n, f in registry.available().items()
            if isinstance(f, type) and f.kind in FAST_KINDS
        ),
        help="checkers the streaming worker runs (default: the fast tier)",
    )
    parser.add_argument(
        "--warmup", type=float, default=WARMUP_S, help="seconds at the rate before the timed ones"
    )
    parser.add_argument("--skip-stream", action="store_true", help="only part 1")
    parser.add_argument("--skip-engine", action="store_true", help="only part 2")
    args = parser.parse_args()
    if not args.skip_engine:
        part1(args.data, args.steps)
    if not args.skip_stream:
        settings, worker = start_worker(args.stream_checkers)
        try:  # on the event loop the worker runs on (uvloop), so the load costs it less
            aio.run(
                part2(
                    settings,
                    worker,
                    args.data,
                    args.rate,
                    args.seconds,
                    args.stream_checkers,
                    args.warmup,
                )
            )
        finally:
            stop_worker(worker)
            asyncio.run(drop_topics(settings))


if __name__ == "__main__":
    main()
