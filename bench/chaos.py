"""The fault campaign (issues #14, #33) as code: a pipeline under SIGKILLs and stalls, then an
honest count.

What it runs, all real processes on a broker of its own (or a 3-node cluster, ``--cluster``):

    safactory worker audit · safactory worker assemble · safactory worker sink
    safactory worker score · safactory worker skills
    safactory worker simulate (tools env, random policy: a share of the steps)
    the campaign's own fast agent (bench/chaos_agent.py: the bulk of the steps)

While steps flow, it SIGKILLs the workers in turn (each restarted after ``--restart-delay``
seconds, as a supervisor would), and once, midway, the broker (``--broker-kill``; with
``--cluster``, the node leading a ``sf.steps`` partition) which comes back after
``--broker-down`` seconds. Between the kills it stalls the workers in turn (``--stalls``):
SIGSTOP of the whole process group for ``--stall-s`` seconds (20: twice the group session
timeout), then SIGCONT, so the group expels the member and it must rejoin and go on. A worker
that exits on its own is restarted too, reported, and fails the campaign.
Then it drains: waits until every consumer group's lag on the run's topics is 0 and the
topics and tables stop changing, stops the workers with SIGINT (reporting any that had to be
killed), reads the topics to their end offsets and the LanceDB tables, and prints and writes
(``--out``) the figures: rows lost / duplicated per table, steps in no trajectory,
trajectories complete, trajectories never scored, distillable trajectories in no skill,
dead letters by reason, each worker's memory over time.

Target: 0 lost, 0 duplicated, 0 steps outside their trajectory, no worker exiting by itself,
memory flat after warm-up.

    python bench/chaos.py                                  # the full campaign (~6-8 min)
    python bench/chaos.py --steps 3000 --kills 3 --out short.json
    python bench/chaos.py --cluster --steps 3000 --kills 4 # leader kill on 3 KRaft nodes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.errors import KafkaError

from safactory.agents.tasks import suite_tasks
from safactory.bench.chaos_agent import SyntheticAgent
from safactory.bench.chaos_count import (
    TABLE_TOPICS,
    figures,
    read_tables,
    read_topics,
    topic_partitions,
)
from safactory.bench.chaos_rss import RssSampler
from safactory.infra.broker import LocalBroker
from safactory.infra.cluster import LocalCluster
from safactory.infra.config import Settings
from safactory.infra.fleet import Fleet, Worker
from safactory.infra.producer import EventProducer
from safactory.infra.topics import CATALOGUE, admin_client, create_topics

REPO = Path(__file__).resolve().parents[1]
SIM_STEPS_PER_TASK = 4
"""Fewest steps a tools-env episode of the random policy takes on average (4.6-5.7 were
measured), so the simulation share is at least what was asked."""


@dataclass(frozen=True)
class Options:
    """The campaign's knobs (the command line)."""

    steps: int
    kills: int
    broker_kill: bool
    stalls: int
    stall_s: float
    cluster: bool
    rate: float
    sim_share: float
    restart_delay: float
    broker_down: float
    episode_timeout: float
    verdict_timeout: float
    settle: float
    drain_timeout: float
    warmup: float
    port: int
    workdir: Path
    keep: bool
    out: Path | None = None


@dataclass
class Fault:
    """One fault injected, and when (seconds since the campaign began)."""

    at_s: float
    kind: str
    target: str
    pid: int | None = None
    progress: float = 0.0
    back_after_s: float | None = None
    note: str = ""


@dataclass
class Campaign:
    """The running campaign: broker(s), workers, faults, memory samples."""

    options: Options
    run: str
    settings: Settings
    fleet: Fleet
    broker: LocalBroker | None
    cluster: LocalCluster | None
    rss: RssSampler
    started: float = field(default_factory=time.monotonic)
    incarnation: dict[str, int] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    unexpected_exits: list[dict[str, Any]] = field(default_factory=list)
    killing: set[str] = field(default_factory=set)
    deferred_stalls: dict[str, float] = field(default_factory=dict)
    """Stalls due while their worker was being restarted (done once it is back)."""
    pending: list[asyncio.Task[None]] = field(default_factory=list)
    last_start: float = 0.0
    """When a worker was last (re)started (monotonic s)."""

    def now(self) -> float:
        """Seconds since the campaign began."""
        return round(time.monotonic() - self.started, 1)

    # ------------------------------------------------------------------ workers

    def commands(self) -> dict[str, list[str]]:
        """The workers and their ``safactory`` arguments."""
        o = self.options
        return {
            "audit": ["worker", "audit"],
            "assemble": [
                "worker",
                "assemble",
                "--verdict-timeout",
                f"{o.verdict_timeout:g}",
                "--episode-timeout",
                f"{o.episode_timeout:g}",
            ],
            "sink": [
                "worker",
                "sink",
                "--db",
                str(o.workdir / "lancedb"),
                "--group",
                f"{self.run}-sink",
                "--no-embed",
                "--maintain-every",
                "60",
            ],
            "score": ["worker", "score", "--group", f"{self.run}-score"],
            "skills": ["worker", "skills", "--group", f"{self.run}-skills"],
            "simulate": [
                "worker",
                "simulate",
                "--policy",
                "random",
                "--concurrency",
                "4",
                "--group",
                f"{self.run}-sim",
                "--warm",
                "tools",
                "--timeout",
                "60",
            ],
        }

    def start(self, name: str) -> Worker:
        """Start (or restart) worker ``name`` as a new incarnation with its own log."""
        n = self.incarnation[name] = self.incarnation.get(name, 0) + 1
        worker = self.fleet.start(f"{name}.{n}", self.commands()[name])
        self.last_start = time.monotonic()
        self.rss.watch(name, worker.process.pid)
        return worker

    def current(self, name: str) -> Worker:
        """The live incarnation of worker ``name``."""
        return self.fleet.workers[f"{name}.{self.incarnation[name]}"]

    def kill_worker(self, name: str, progress: float) -> None:
        """SIGKILL worker ``name``'s whole process group now; restart it after the delay."""
        worker = self.current(name)
        self.killing.add(name)
        self.fleet.stopped.add(worker.name)
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        worker.process.wait()
        worker.handle.close()
        fault = Fault(self.now(), "sigkill", name, worker.process.pid, round(progress, 3))
        self.faults.append(fault)
        print(f"[{fault.at_s:6.1f}s] SIGKILL {name} (pid {fault.pid}) at {progress:.0%}")

        async def restart() -> None:
            await asyncio.sleep(self.options.restart_delay)
            self.start(name)
            self.killing.discard(name)
            fault.back_after_s = round(self.now() - fault.at_s, 1)
            if name in self.deferred_stalls:
                self.stall_worker(name, self.deferred_stalls.pop(name))

        self.pending.append(asyncio.ensure_future(restart()))

    def stall_worker(self, name: str, progress: float) -> None:
        """SIGSTOP worker ``name``'s process group for ``stall_s`` seconds, then SIGCONT:
        a frozen process (a swapped-out or throttled machine) whose group session expires
        meanwhile; it must rejoin and go on, never exit. A worker being restarted after a
        kill is stalled once it is back (its old process is gone)."""
        if name in self.killing:
            self.deferred_stalls[name] = progress
            return
        worker = self.current(name)
        try:
            os.killpg(worker.process.pid, signal.SIGSTOP)
        except ProcessLookupError:
            return
        fault = Fault(self.now(), "sigstop", name, worker.process.pid, round(progress, 3))
        self.faults.append(fault)
        print(f"[{fault.at_s:6.1f}s] SIGSTOP {name} (pid {fault.pid}) at {progress:.0%}")

        async def resume() -> None:
            await asyncio.sleep(self.options.stall_s)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(worker.process.pid, signal.SIGCONT)
            fault.back_after_s = round(self.now() - fault.at_s, 1)
            print(f"[{self.now():6.1f}s] SIGCONT {name}")

        self.pending.append(asyncio.ensure_future(resume()))

    def supervise(self) -> None:
        """Restart any worker that exited on its own, and record that it did."""
        for name in list(self.incarnation):
            if name in self.killing:
                continue
            worker = self.current(name)
            code = worker.process.poll()
            if code is None:
                continue
            self.fleet.stopped.add(worker.name)
            worker.handle.close()
            self.unexpected_exits.append(
                {
                    "at_s": self.now(),
                    "worker": name,
                    "code": code,
                    "log": str(worker.log),
                    "tail": worker.tail(8),
                }
            )
            print(
                f"[{self.now():6.1f}s] {name} exited by itself (code {code}); restarting "
                f"(log {worker.log})"
            )
            self.start(name)

    # ------------------------------------------------------------------ brokers

    async def kill_broker(self, progress: float) -> None:
        """SIGKILL the broker (or the leader of sf.steps partition 0); bring it back later."""
        if self.cluster is not None:
            leader = await steps_leader(self.settings)
            node = self.cluster.node(leader)
            kind, target = (
                "leader_kill",
                f"node {leader} (leader of {self.settings.topic('steps')}-0)",
            )
        else:
            assert self.broker is not None
            node, kind, target = self.broker, "broker_kill", "broker"
        pid = node.pid()
        await asyncio.to_thread(node.kill)
        fault = Fault(self.now(), kind, target, pid, round(progress, 3))
        self.faults.append(fault)
        print(f"[{fault.at_s:6.1f}s] SIGKILL {target} (pid {pid}) at {progress:.0%}")
        await asyncio.sleep(self.options.broker_down)
        await asyncio.to_thread(node.up)
        fault.back_after_s = round(self.now() - fault.at_s, 1)
        self.rss.watch(
            "broker" if self.cluster is None else f"node-{node.node_id}", node.pid() or 0
        )
        print(f"[{self.now():6.1f}s] {target} back")


async def steps_leader(settings: Settings) -> int:
    """Node id leading partition 0 of the run's sf.steps."""
    admin = admin_client(settings)
    await admin.start()
    try:
        meta = await admin.describe_topics([settings.topic("steps")])
    finally:
        await admin.close()
    partitions = {p["partition"]: p for p in meta[0]["partitions"]}
    return int(partitions[0]["leader"])


# ---------------------------------------------------------------------- the flow


def fault_plan(
    kills: int, broker_kill: bool, workers: list[str], stalls: int = 0
) -> list[tuple[float, str, str]]:
    """(share of the flow, kind, target) for every fault: evenly spread, the broker in the
    middle, kills and stalls alternating, the workers in turn for each kind (so each is
    killed, and stalled, when there are at least as many as workers)."""
    mixed = _interleave(["kill"] * kills, ["stall"] * stalls)
    if broker_kill:
        mixed.insert(len(mixed) // 2, "broker")
    slots = [(j + 1) / (len(mixed) + 1) for j in range(len(mixed))]
    turns = {"kill": 0, "stall": 0}
    plan: list[tuple[float, str, str]] = []
    for at, kind in zip(slots, mixed, strict=True):
        if kind == "broker":
            plan.append((at, "kill", "broker"))
            continue
        plan.append((at, kind, workers[turns[kind] % len(workers)]))
        turns[kind] += 1
    return plan


def _interleave(a: list[str], b: list[str]) -> list[str]:
    """Items of ``a`` and ``b`` spread evenly among each other."""
    total = len(a) + len(b)
    out: list[str] = []
    i = j = 0
    for k in range(total):
        if j >= len(b) or (i < len(a) and i * total <= k * len(a)):
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    return out


async def flow(campaign: Campaign) -> dict[str, Any]:
    """Publish the steps (agent + simulation tasks) while the faults are injected."""
    o = campaign.options
    sim_steps = int(o.steps * o.sim_share)
    tasks = suite_tasks(
        "tools",
        max(1, sim_steps // SIM_STEPS_PER_TASK) if sim_steps else 0,
        group_id=f"{campaign.run}-sim",
        seed=7,
    )
    plan = fault_plan(o.kills, o.broker_kill, list(campaign.commands()), o.stalls)
    agent = SyntheticAgent(
        campaign.settings,
        campaign.run,
        total_steps=o.steps - sim_steps,
        rate=o.rate * (1 - o.sim_share),
    )
    task_chunks = [tasks[i::10] for i in range(10)]
    published_tasks = 0

    def on_progress(done: float) -> None:
        nonlocal published_tasks
        while plan and done >= plan[0][0]:
            _, kind, target = plan.pop(0)
            if target == "broker":
                campaign.pending.append(asyncio.ensure_future(campaign.kill_broker(done)))
            elif kind == "stall":
                campaign.stall_worker(target, done)
            else:
                campaign.kill_worker(target, done)
        while task_chunks and done >= (10 - len(task_chunks)) / 10:
            chunk = task_chunks.pop(0)
            published_tasks += len(chunk)
            campaign.pending.append(asyncio.ensure_future(publish_tasks(campaign.settings, chunk)))
        campaign.supervise()

    stats = await agent.run(on_progress)
    for chunk in task_chunks:
        published_tasks += len(chunk)
        await publish_tasks(campaign.settings, chunk)
    while campaign.pending:
        await campaign.pending.pop(0)
    campaign.supervise()
    return {
        "agent_steps": stats.steps,
        "agent_episodes": stats.episodes,
        "agent_publish_retries": stats.publish_retries,
        "agent_errors": stats.errors[:5],
        "sim_tasks": published_tasks,
        "acked_steps": stats.acked_steps,
    }


async def publish_tasks(settings: Settings, tasks: list[Any]) -> None:
    """Publish simulation tasks, retrying while a broker is down."""
    if not tasks:
        return
    for _ in range(60):
        try:
            async with EventProducer(settings, request_timeout_ms=30_000) as producer:
                await producer.publish_many(tasks)
            return
        except Exception as exc:
            print(f"publishing {len(tasks)} tasks failed ({exc}); retrying")
            await asyncio.sleep(2.0)


async def until_joined(campaign: Campaign, groups: int, timeout_s: float) -> None:
    """Wait until ``groups`` consumer groups of the run exist (the workers joined), so the
    first steps meet running workers rather than their start-up."""
    deadline = time.monotonic() + timeout_s
    names: list[str] = []
    admin = admin_client(campaign.settings)
    await admin.start()
    try:
        while time.monotonic() < deadline:
            campaign.supervise()
            try:
                listed = await admin.list_consumer_groups()
            except KafkaError:  # a new broker still loading its group coordinator
                listed = []
            names = [g for g, _ in listed if campaign.run in g]
            if len(names) >= groups:
                return
            await asyncio.sleep(1.0)
    finally:
        await admin.close()
    print(f"only {len(names)} of {groups} consumer groups after {timeout_s:g}s: {names}")


# ---------------------------------------------------------------------- the drain


async def snapshot(settings: Settings, db: Path) -> tuple[int, dict[str, Any], tuple[Any, ...]]:
    """(total lag, lag per group and where, a fingerprint of end offsets and table sizes)."""
    from safactory.infra.reader import TopicReader

    partitions = await topic_partitions(settings)
    async with TopicReader(settings, "chaos-drain") as reader:
        ends = await reader.last_offsets(partitions)
    admin = admin_client(settings)
    await admin.start()
    try:
        lags: dict[str, int] = {}
        detail: dict[str, dict[str, int]] = {}
        for group, _ in await admin.list_consumer_groups():
            committed = await admin.list_consumer_group_offsets(group)
            mine = {tp.topic for tp in committed if tp.topic.startswith(settings.topic_prefix)}
            if not mine:
                continue
            behind = {
                f"{tp.topic}-{tp.partition}": end - (committed[tp].offset if tp in committed else 0)
                for tp, end in ends.items()
                if tp.topic in mine
            }
            lags[group] = sum(max(0, n) for n in behind.values())
            if lags[group]:
                detail[group] = {k: n for k, n in behind.items() if n > 0}
    finally:
        await admin.close()
    sizes = await asyncio.to_thread(table_sizes, db)
    fingerprint = (
        tuple(sorted((f"{tp.topic}-{tp.partition}", e) for tp, e in ends.items())),
        tuple(sorted(sizes.items())),
    )
    return sum(lags.values()), {"total": lags, "behind": detail}, fingerprint


def table_sizes(db: Path) -> dict[str, int]:
    """Rows per LanceDB table (0 while a table does not exist)."""
    from safactory.sinks.location import open_db

    if not db.exists():
        return {}
    conn = open_db(db)
    names = set(conn.list_tables().tables)
    return {n: conn.open_table(n).count_rows() for n in TABLE_TOPICS if n in names}


async def drain(campaign: Campaign, flow_ended: float) -> dict[str, Any]:
    """Wait until nothing moves: end offsets, table sizes and every group's committed offsets
    unchanged for ``settle`` s, no worker (re)started within the last ``settle`` + 10 s, and
    the assembler given time to abandon unended episodes; give up after ``drain_timeout`` s.

    Lag 0 is not required here: a consumer may hold its last batch's offsets uncommitted
    while its topics are idle. What that leaves is reported (``lag_while_idle``), and the
    lag measured again after the workers stopped, when each should have committed.
    """
    o = campaign.options
    db = o.workdir / "lancedb"
    began = time.monotonic()
    stable_since: float | None = None
    last: tuple[Any, ...] | None = None
    lags: dict[str, Any] = {}
    earliest = flow_ended + o.episode_timeout + o.verdict_timeout + 5
    while time.monotonic() - began < o.drain_timeout:
        campaign.supervise()
        try:
            _, lags, fingerprint = await snapshot(campaign.settings, db)
        except Exception as exc:  # a broker still recovering, a table mid-write
            print(f"drain: snapshot failed ({type(exc).__name__}: {exc}); retrying")
            await asyncio.sleep(2.0)
            continue
        now = time.monotonic()
        fingerprint = (fingerprint, tuple(sorted(lags["total"].items())))
        if fingerprint == last:
            stable_since = stable_since or now
            quiet = now - max(stable_since, campaign.last_start + 10)
            if quiet >= o.settle and now >= earliest:
                return {"drained": True, "seconds": round(now - began, 1), "lag_while_idle": lags}
        else:
            stable_since = None
        last = fingerprint
        await asyncio.sleep(2.0)
    print(f"drain: gave up after {o.drain_timeout:g}s; lag {lags}")
    return {"drained": False, "seconds": round(time.monotonic() - began, 1), "lag_while_idle": lags}


# ---------------------------------------------------------------------- the whole


def commit() -> str:
    """The checkout's commit, marked ``+dirty`` when tracked files differ from it."""
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "-uno"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return f"{head}{'+dirty' if dirty else ''}" or "unknown"


def child_env(settings: Settings, workdir: Path) -> dict[str, str]:
    """The workers' environment: the run's cluster, topics, home and database."""
    env = dict(os.environ)
    env.update(
        {
            "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "SF_TOPIC_PREFIX": settings.topic_prefix,
            "SF_HOME": str(workdir / "home"),
            "SF_LANCE_URI": str(workdir / "lancedb"),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


async def campaign_main(o: Options) -> dict[str, Any]:
    """Set up, run the flow under faults, drain, stop and count; the figures as a dict."""
    run = f"chaos-{os.urandom(3).hex()}"
    home = Settings().home
    rss = RssSampler()
    if o.cluster:
        cluster: LocalCluster | None = LocalCluster(home, name=run, base_port=o.port)
        broker: LocalBroker | None = None
        print(f"starting a 3-node KRaft cluster on {cluster.bootstrap}")
    else:
        cluster = None
        broker = LocalBroker(home, port=o.port, controller_port=o.port + 1, heap="256m", name=run)
        print(f"starting a broker on {broker.bootstrap}")
    try:
        return await _campaign(o, run, broker, cluster, rss)
    finally:
        rss.stop()
        if cluster is not None:
            await asyncio.to_thread(cluster.down if o.keep else cluster.remove)
        elif broker is not None:
            await asyncio.to_thread(broker.kill)
            if not o.keep:
                shutil.rmtree(broker.dir, ignore_errors=True)


async def _campaign(
    o: Options,
    run: str,
    broker: LocalBroker | None,
    cluster: LocalCluster | None,
    rss: RssSampler,
) -> dict[str, Any]:
    if cluster is not None:
        await asyncio.to_thread(cluster.up)
        bootstrap = cluster.bootstrap
        for node in cluster.nodes:
            rss.watch(f"node-{node.node_id}", node.pid() or 0)
    else:
        assert broker is not None
        await asyncio.to_thread(broker.up)
        bootstrap = broker.bootstrap
        rss.watch("broker", broker.pid() or 0)
    settings = Settings(kafka_bootstrap=bootstrap, topic_prefix=f"{run}.")
    fleet = Fleet(o.workdir / "logs", child_env(settings, o.workdir))
    campaign = Campaign(o, run, settings, fleet, broker, cluster, rss)
    result: dict[str, Any] = {
        "run": run,
        "commit": commit(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in o.__dict__.items()},
    }
    try:
        await create_topics(settings, CATALOGUE)
        rss.start()
        for name in campaign.commands():
            campaign.start(name)
        await until_joined(campaign, groups=len(campaign.commands()), timeout_s=120.0)
        print(
            f"[{campaign.now():6.1f}s] workers up; {o.steps} steps at {o.rate:g}/s, "
            f"{o.kills} worker kills, {o.stalls} stalls of {o.stall_s:g} s"
            f"{', 1 broker kill' if o.broker_kill else ''}"
        )
        flow_started = campaign.now()
        result["flow"] = await flow(campaign)
        flow_ended = time.monotonic()
        result["flow"]["seconds"] = round(campaign.now() - flow_started, 1)
        print(f"[{campaign.now():6.1f}s] flow done; draining")
        result["drain"] = await drain(campaign, flow_ended)
        print(f"[{campaign.now():6.1f}s] drained={result['drain']['drained']}; stopping workers")
        result["killed_on_stop"] = await asyncio.to_thread(fleet.stop, None, 30.0)
        _, result["drain"]["lag_after_stop"], _ = await snapshot(settings, o.workdir / "lancedb")
        rss.stop()
        topics = await read_topics(settings, [s.name for s in CATALOGUE])
        tables = await asyncio.to_thread(read_tables, o.workdir / "lancedb")
        acked = result["flow"].pop("acked_steps")
        result.update(figures(topics, tables, acked))
        result["faults"] = [f.__dict__ for f in campaign.faults]
        result["unexpected_exits"] = campaign.unexpected_exits
        result["rss"] = rss.summary(o.warmup)
        (o.workdir / "rss.json").write_text(json.dumps(rss.raw()))
        result["seconds"] = campaign.now()
        result["verdict"] = verdict(result)
        return result
    finally:
        rss.stop()
        fleet.stop(grace_s=5.0)


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The headline: the four targets and whether each was met."""
    tables = result["tables"]
    lost = sum(t["lost"] for t in tables.values()) + result["steps"]["acked_but_missing"]
    lost += result["scores"]["trajectories_never_scored"] + result["skills"]["in_no_skill"]
    duplicated = sum(t["duplicated"] for t in tables.values())
    orphans = max(result["steps"]["in_no_trajectory"], result["steps"]["in_no_stored_trajectory"])
    slopes = {name: s["longest"].get("slope_mb_per_min") for name, s in result["rss"].items()}
    return {
        "lost": lost,
        "duplicated": duplicated,
        "steps_in_no_trajectory": orphans,
        "drained": result["drain"]["drained"],
        "rss_slope_mb_per_min": slopes,
        "lag_after_stop": sum(result["drain"]["lag_after_stop"]["total"].values()),
        "unexpected_exits": len(result["unexpected_exits"]),
        "passed": lost == 0
        and duplicated == 0
        and orphans == 0
        and result["drain"]["drained"]
        and not result["unexpected_exits"],
    }


# ---------------------------------------------------------------------- output


def report(result: dict[str, Any]) -> str:
    """The figures as plain-text tables."""
    lines = [
        f"chaos campaign {result['run']} on commit {result['commit']}: "
        f"{result['steps']['distinct']} steps, {len(result['faults'])} faults, "
        f"{result['seconds']:.0f}s"
    ]
    lines.append("\nfaults:")
    for f in result["faults"]:
        back = f"back after {f['back_after_s']}s" if f["back_after_s"] is not None else "not back"
        lines.append(
            f"  {f['at_s']:7.1f}s  {f['kind']:<11} {f['target']:<40} at {f['progress']:.0%}, {back}"
        )
    for e in result["unexpected_exits"]:
        lines.append(f"  {e['at_s']:7.1f}s  EXITED      {e['worker']} by itself, code {e['code']}")
    lines.append("\nrows per table (expected = distinct ids on the source topic):")
    lines.append(f"  {'table':<14}{'expected':>10}{'rows':>10}{'lost':>8}{'dup':>8}{'unexp':>8}")
    for name, t in result["tables"].items():
        lines.append(
            f"  {name:<14}{t['expected']:>10}{t['rows']:>10}{t['lost']:>8}"
            f"{t['duplicated']:>8}{t['unexpected']:>8}"
        )
    s, tr = result["steps"], result["trajectories"]
    lines.append("\nsteps and trajectories:")
    for label, value in [
        ("steps on sf.steps (distinct)", s["distinct"]),
        ("acknowledged to the agent but missing", s["acked_but_missing"]),
        ("steps in no trajectory (sf.trajectories)", s["in_no_trajectory"]),
        ("  of which in episodes that never ended", s["in_no_trajectory_of_unended_episodes"]),
        ("steps in no stored trajectory (LanceDB)", s["in_no_stored_trajectory"]),
        ("steps with no step verdict", s["without_step_verdict"]),
        ("episodes whose steps arrived out of order", s["episodes_out_of_order"]),
        (
            "episodes / ended / with a trajectory",
            f"{tr['episodes']} / {tr['episodes_ended']} / {tr['episodes_with_trajectory']}",
        ),
        ("ended episodes with no trajectory", tr["ended_without_trajectory"]),
        ("trajectories complete / incomplete", f"{tr['complete']} / {tr['incomplete']}"),
        ("episodes with more than one trajectory", tr["episodes_with_several"]),
        ("trajectories completed by", tr["completed_by"]),
        ("trajectories never scored (sf.scores)", result["scores"]["trajectories_never_scored"]),
        (
            "distillable trajectories / in no skill",
            f"{result['skills']['distillable']} / {result['skills']['in_no_skill']}",
        ),
    ]:
        lines.append(f"  {label:<44}{value}")
    letters = ", ".join(f"{k} ×{n}" for k, n in result["dead_letters"].items())
    lines.append(f"\ndead letters: {letters or 'none'}")
    d = result["drain"]
    lines.append(
        f"drain: drained {d['drained']} after {d['seconds']}s; lag while idle "
        f"{d['lag_while_idle'].get('total')} {d['lag_while_idle'].get('behind')}; "
        f"lag after stop {d['lag_after_stop'].get('total')}"
    )
    lines.append(f"killed on stop (SIGINT ignored 30 s): {result['killed_on_stop'] or 'none'}")
    lines.append(
        "\nmemory (MB, longest-lived incarnation): start / after warm-up / end / peak, "
        "slope after warm-up"
    )
    for name, r in result["rss"].items():
        x = r["longest"]
        lines.append(
            f"  {name:<10} x{len(r['incarnations'])}  {x.get('start_mb')} / "
            f"{x.get('warm_mb')} / {x.get('end_mb')} / {x.get('peak_mb')} over "
            f"{x.get('seconds')}s, {x.get('slope_mb_per_min')} MB/min"
        )
    v = result["verdict"]
    lines.append(
        f"\nverdict: lost {v['lost']}, duplicated {v['duplicated']}, steps in no "
        f"trajectory {v['steps_in_no_trajectory']}, drained {v['drained']}, workers that "
        f"exited by themselves {v['unexpected_exits']} → "
        f"{'PASS' if v['passed'] else 'FAIL'}"
    )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> Options:
    """The command line as :class:`Options`."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--steps", type=int, default=20_000, help="steps in all (default 20,000)")
    p.add_argument("--kills", type=int, default=12, help="worker SIGKILLs, spread over workers")
    p.add_argument(
        "--broker-kill",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also SIGKILL the broker (with --cluster: a partition leader) midway",
    )
    p.add_argument(
        "--stalls",
        type=int,
        default=6,
        help="worker SIGSTOPs (each continued after --stall-s), spread over workers",
    )
    p.add_argument("--stall-s", type=float, default=20.0, help="s a stalled worker stays stopped")
    p.add_argument(
        "--cluster", action="store_true", help="3 KRaft nodes, replication 3, min.insync.replicas 2"
    )
    p.add_argument("--rate", type=float, default=120.0, help="steps per second offered")
    p.add_argument(
        "--sim-share",
        type=float,
        default=0.1,
        help="share of steps from real simulation workers (tools env)",
    )
    p.add_argument("--restart-delay", type=float, default=2.0, help="s before a restart")
    p.add_argument("--broker-down", type=float, default=6.0, help="s the broker stays down")
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=30.0,
        help="assembler: s of silence before an unended episode is abandoned",
    )
    p.add_argument(
        "--verdict-timeout",
        type=float,
        default=30.0,
        help="assembler: s after an episode's end to wait for its verdicts",
    )
    p.add_argument("--settle", type=float, default=10.0, help="s without change = drained")
    p.add_argument("--drain-timeout", type=float, default=420.0, help="s to wait for lag 0")
    p.add_argument("--warmup", type=float, default=30.0, help="s of a worker's warm-up (RSS)")
    p.add_argument(
        "--port",
        type=int,
        default=19292,
        help="first port of the campaign's broker(s) (two per node)",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="logs, LanceDB and rss.json (default: a new temporary folder)",
    )
    p.add_argument("--keep", action="store_true", help="keep the broker data afterwards")
    p.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    a = p.parse_args(argv)
    if a.steps < 100:
        p.error(f"--steps {a.steps}: at least 100, so every fault falls mid-flow")
    if a.kills < 0 or a.stalls < 0:
        p.error(f"--kills {a.kills} --stalls {a.stalls}: 0 or more")
    if not 0 <= a.sim_share < 1:
        p.error(f"--sim-share {a.sim_share}: a share in [0, 1), e.g. 0.1")
    workdir = (a.workdir or Path(tempfile.mkdtemp(prefix="sf-chaos-"))).resolve()
    if (workdir / "lancedb").exists():
        p.error(f"--workdir {workdir} holds an earlier run's lancedb/; choose a new folder")
    workdir.mkdir(parents=True, exist_ok=True)
    options = Options(
        steps=a.steps,
        kills=a.kills,
        broker_kill=a.broker_kill,
        stalls=a.stalls,
        stall_s=a.stall_s,
        cluster=a.cluster,
        rate=a.rate,
        sim_share=a.sim_share,
        restart_delay=a.restart_delay,
        broker_down=a.broker_down,
        episode_timeout=a.episode_timeout,
        verdict_timeout=a.verdict_timeout,
        settle=a.settle,
        drain_timeout=a.drain_timeout,
        warmup=a.warmup,
        port=a.port,
        workdir=workdir,
        keep=a.keep,
        out=a.out,
    )
    return options


def main(argv: list[str] | None = None) -> int:
    """Run the campaign; exit 0 when every target was met, 1 otherwise."""
    options = parse_args(argv)
    print(f"workdir {options.workdir}")
    result = asyncio.run(campaign_main(options))
    print(report(result))
    if options.out is not None:
        options.out.write_text(json.dumps(result, indent=2, default=str))
        print(f"figures written to {options.out}")
    return 0 if result["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
