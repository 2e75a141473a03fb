"""Which stream-processor runtime: faust-streaming or the project's own (``infra.processor``
with its ``ChangelogStore``), measured side by side on one broker in one run.

    python bench/runtime_compare.py [--rate 2000] [--seconds 20] [--kills 10] [--episodes 2000]

Part 1, latency: a processor that answers every step on ``sf.steps`` with one verdict on
``sf.verdicts`` (outputs acknowledged before offsets commit), fed at ``--rate`` steps/s;
step ``produced_at`` → verdict arrival, p50 / p99, for each runtime in turn.

Part 2, recovery with state: a processor that keeps, per episode, the step indexes it has
seen (faust: a changelog-backed ``Table``; own: records in a co-partitioned compacted topic
read back on assignment) and emits one verdict when all 5 steps of an episode are in. While
``--episodes`` episodes stream in, the processor is SIGKILLed ``--kills`` times and restarted
at once. Then it drains. Counted: episodes with no output (lost), extra outputs (duplicated,
allowed by at-least-once), restarts after which nothing came out for 60 s (hangs).

The processors run as subprocesses of this script (``serve``), on fresh topics per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.infra.processor import Context, Processor, Runtime
from safactory.infra.producer import EventProducer
from safactory.infra.reader import TopicReader
from safactory.infra.topics import TopicSpec, create_topics
from safactory.schemas import Action, Decision, Severity, Step, Verdict, codec, derive_id

STEPS_PER_EPISODE = 5
STATE = TopicSpec("bench-state", "episode", "own runtime's state", cleanup="compact")


def _verdict(step: Step, checker: str, episode_level: bool = False) -> Verdict:
    return Verdict(
        event_id=derive_id(checker, 1, step.episode_id if episode_level else step.event_id),
        episode_id=step.episode_id,
        source_event_id=step.event_id,
        step_index=None if episode_level else step.step_index,
        env=step.env,
        checker=checker,
        risk_type="none",
        severity=Severity.NONE,
        score=0.0,
        decision=Decision.ALLOW,
        produced_at=step.produced_at,  # the step's time: arrival minus this is the latency
    )


# ---------------------------------------------------------------------- the two runtimes


def serve_faust(settings: Settings, mode: str, home: Path) -> None:
    """The processor as a faust agent (concurrency 1, at-least-once, raw bytes)."""
    import faust

    app = faust.App(
        f"bench-{settings.topic_prefix}{mode}",
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        value_serializer="json",
        key_serializer="json",
        topic_partitions=settings.default_partitions,
        topic_replication_factor=1,
        processing_guarantee="at_least_once",
        web_enabled=False,
        broker_commit_every=100,
        broker_commit_interval=1.0,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        datadir=str(home / "faust"),
        broker_session_timeout=10.0,
        broker_rebalance_timeout=20.0,
        broker_heartbeat_interval=1.0,
        producer_max_request_size=9 * 1024 * 1024,
    )
    steps = app.topic(settings.topic("steps"), key_serializer="raw", value_serializer="raw")
    verdicts = app.topic(settings.topic("verdicts"), key_serializer="raw", value_serializer="raw")
    seen = app.Table("seen", default=list, partitions=settings.default_partitions)

    async def send(verdict: Verdict) -> object:
        record = codec.encode(verdict)
        return await verdicts.send(key=record.key, value=record.value, headers=record.headers)

    @app.agent(steps, concurrency=1)
    async def process(stream: faust.StreamT) -> None:
        if mode == "echo":  # batches: outputs of a batch acknowledged together
            async for batch in stream.take_events(500, within=0.005):
                acks = []
                for event in batch:
                    step = codec.decode(event.message.value, event.message.headers)
                    acks.append(await send(_verdict(step, "echo")))
                await asyncio.gather(*acks)
            return
        async for event in stream.events():  # a table is written within its event
            step = codec.decode(event.message.value, event.message.headers)
            indexes = set(seen[step.episode_id])
            if -1 in indexes:  # done
                continue
            indexes.add(step.step_index)
            if len(indexes) == STEPS_PER_EPISODE:
                await (await send(_verdict(step, "count", episode_level=True)))
                indexes = {-1}
            seen[step.episode_id] = sorted(indexes)

    faust.Worker(app, loglevel="warning").execute_from_commandline()


async def serve_own(settings: Settings, mode: str) -> None:
    """The processor on ``infra.processor`` with its state in a ``ChangelogStore``."""

    async def handle(record: Delivery, ctx: Context) -> None:
        step = record.event
        assert isinstance(step, Step) and ctx.state is not None
        if mode == "echo":
            ctx.emit(_verdict(step, "echo"))
            return
        indexes = set((ctx.state.get(step.episode_id, "seen") or b"").decode().split(","))
        indexes.discard("")
        if "done" in indexes:
            return
        indexes.add(str(step.step_index))
        if len(indexes) == STEPS_PER_EPISODE:
            ctx.emit(_verdict(step, "count", True))
            indexes = {"done"}
        ctx.state.set(step.episode_id, "seen", ",".join(sorted(indexes)).encode())

    processor = Processor(
        "bench",
        inputs=("steps",),
        outputs=("verdicts",),
        state=STATE,
        handle=handle,
        group=f"bench-{mode}",
    )
    await Runtime(settings, processor, worker="audit").serve()


# ---------------------------------------------------------------------- the driver


def start(runtime: str, mode: str, settings: Settings, home: Path) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": settings.topic_prefix,
    }
    home.mkdir(parents=True, exist_ok=True)
    log = open(home / f"{runtime}-{mode}.log", "ab")  # the child process keeps it open
    return subprocess.Popen(
        [sys.executable, __file__, "serve", runtime, mode, str(home)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def fresh(bootstrap: str) -> Settings:
    return Settings(kafka_bootstrap=bootstrap, topic_prefix=f"rc{uuid.uuid4().hex[:8]}.")


def episode_steps(n: int, run: str) -> list[Step]:
    now = time.time()
    return [
        Step(
            episode_id=f"{run}-{n}",
            step_index=i,
            env="bench",
            task_id="t",
            policy_version=0,
            observation="o",
            action=Action(text="a"),
            produced_at=now,
        )
        for i in range(STEPS_PER_EPISODE)
    ]


class Outputs:
    """Verdicts arriving on ``sf.verdicts``, read concurrently with the load."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.latency: list[float] = []
        self.by_episode: Counter[str] = Counter()
        self.last_arrival = time.monotonic()

    async def follow(self, stop: asyncio.Event) -> None:
        async with TopicReader(self.settings, "bench-outputs", committed_only=False) as reader:
            await reader.open(await reader.partitions([self.settings.topic("verdicts")], wait_s=30))
            while not stop.is_set():
                records = await reader.read(timeout_ms=200)
                now = time.time()
                for r in records:
                    v = codec.decode(r.value, r.headers)
                    self.latency.append(now - v.produced_at)
                    self.by_episode[v.episode_id] += 1
                    self.last_arrival = time.monotonic()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def latency(runtime: str, bootstrap: str, rate: int, seconds: float, home: Path) -> dict:
    settings = fresh(bootstrap)
    await create_topics(settings)
    proc = start(runtime, "echo", settings, home)
    outputs = Outputs(settings)
    stop = asyncio.Event()
    follower = asyncio.create_task(outputs.follow(stop))
    try:
        async with EventProducer(settings) as producer:
            await producer.publish(episode_steps(0, "warm")[0])  # wait for the processor
            while not outputs.latency:
                await asyncio.sleep(0.2)
                if proc.poll() is not None:
                    raise RuntimeError(f"{runtime} processor exited; log in {home}")
            outputs.latency.clear()
            sent, begun, n = 0, time.monotonic(), 1
            while time.monotonic() - begun < seconds:
                due = int((time.monotonic() - begun) * rate)
                while sent < due:
                    for step in episode_steps(n, "lat"):  # stamped now
                        await producer.send(step)
                    sent, n = sent + STEPS_PER_EPISODE, n + 1
                await asyncio.sleep(0.002)
            await producer.flush()
        deadline = time.monotonic() + 60
        while len(outputs.latency) < sent and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
    finally:
        stop.set()
        await follower
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    lat = outputs.latency
    return {
        "runtime": runtime,
        "sent": sent,
        "answered": len(lat),
        "p50_ms": 1000 * pct(lat, 0.5),
        "p99_ms": 1000 * pct(lat, 0.99),
    }


async def recovery(runtime: str, bootstrap: str, episodes: int, kills: int, home: Path) -> dict:
    settings = fresh(bootstrap)
    await create_topics(settings)
    run = uuid.uuid4().hex[:6]
    rng = random.Random(7)
    outputs = Outputs(settings)
    stop = asyncio.Event()
    follower = asyncio.create_task(outputs.follow(stop))
    proc = start(runtime, "count", settings, home)
    hangs, restarts = 0, 0
    try:
        async with EventProducer(settings) as producer:
            order = [s for n in range(episodes) for s in episode_steps(n, run)]
            rng.shuffle(order)  # steps of an episode spread over the stream
            chunk = max(1, len(order) // (kills + 1))
            for k in range(kills + 1):
                await producer.publish_many(
                    order[k * chunk : (k + 1) * chunk] if k < kills else order[k * chunk :]
                )
                await asyncio.sleep(rng.uniform(1.0, 4.0))
                if k < kills:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    proc = start(runtime, "count", settings, home)
                    restarts += 1
        deadline = time.monotonic() + 120
        while len(outputs.by_episode) < episodes and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            if time.monotonic() - outputs.last_arrival > 60:
                hangs += 1
                break
    finally:
        stop.set()
        await follower
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    got = outputs.by_episode
    return {
        "runtime": runtime,
        "episodes": episodes,
        "restarts": restarts,
        "lost": episodes - len(got),
        "duplicated": sum(c - 1 for c in got.values()),
        "hangs": hangs,
    }


async def main(args: argparse.Namespace) -> None:
    home = Path(args.workdir)
    results: dict[str, list[dict]] = {"latency": [], "recovery": []}
    for runtime in ("own", "faust"):
        print(f"latency: {runtime} ...", flush=True)
        results["latency"].append(
            await latency(runtime, args.bootstrap, args.rate, args.seconds, home)
        )
        print(results["latency"][-1], flush=True)
    for runtime in ("own", "faust"):
        print(f"recovery: {runtime} ...", flush=True)
        results["recovery"].append(
            await recovery(runtime, args.bootstrap, args.episodes, args.kills, home)
        )
        print(results["recovery"][-1], flush=True)
    print("\n| runtime | steps/s | answered | p50 ms | p99 ms | lost | duplicated | hangs |")
    print("|---|---|---|---|---|---|---|---|")
    for lat, rec in zip(results["latency"], results["recovery"], strict=True):
        print(
            f"| {lat['runtime']} | {args.rate} | {lat['answered']}/{lat['sent']} | "
            f"{lat['p50_ms']:.0f} | {lat['p99_ms']:.0f} | {rec['lost']} | "
            f"{rec['duplicated']} | {rec['hangs']} |"
        )
    (home / "runtime_compare.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        runtime, mode, home = sys.argv[2], sys.argv[3], Path(sys.argv[4])
        if runtime == "faust":
            serve_faust(Settings(), mode, home)
        else:
            asyncio.run(serve_own(Settings(), mode))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=Settings().kafka_bootstrap)
    parser.add_argument("--rate", type=int, default=2000, help="steps/s in the latency part")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--workdir", default=str(Settings().home / "bench" / "runtime"))
    asyncio.run(main(parser.parse_args()))
