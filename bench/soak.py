"""An hour of the whole loop at a steady rate; flat is the pass.

Every worker runs as the real command on a topic prefix of its own: simulate (the tiny
policy, hot-reloading each version), audit, assemble, sink, score, skills, control (halt on
critical verdicts) and train. Tasks of the choice environment arrive at ``--tasks-per-min``
for ``--minutes``; every minute it samples each worker's resident memory and open files,
every consumer group's lag, and the version count of every LanceDB table, then writes the
samples (``--json``) and a plot (``--png``) and prints, per figure, its value after warm-up,
at the end and its slope (least squares per hour over the samples after ``--warmup``).

    python bench/soak.py --minutes 60 --json soak.json --png docs/img/soak.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from safactory.agents.registry import env_class
from safactory.bench.chaos_rss import _slope_per_min
from safactory.cli.demo import trainer_config
from safactory.infra.config import Settings
from safactory.infra.fleet import Fleet
from safactory.infra.producer import EventProducer
from safactory.infra.reader import TopicReader
from safactory.infra.topics import admin_client, create_topics, delete_topics_where
from safactory.schemas import Task, new_id
from safactory.streams.evaluation.loop import ENV, child_env
from safactory.streams.evaluation.profiles import PROFILES
from safactory.streams.monitor.lag import LagReader

CONTROL = json.dumps({"rules": [{"command": "halt", "min_severity": "critical"}]})


def workers(run: str, workdir: Path, db: Path) -> dict[str, list[str]]:
    """Every worker but the simulation one (started once the trainer announced v0)."""
    return {
        "audit": ["worker", "audit"],
        "assemble": ["worker", "assemble"],
        "sink": ["worker", "sink", "--db", str(db), "--group", f"{run}-sink", "--no-embed"],
        "score": ["worker", "score", "--group", f"{run}-score"],
        "skills": ["worker", "skills"],
        "control": ["worker", "control"],
        "train": ["train", "--config", str(workdir / "trainer.toml"), "--no-live"],
    }


def process_figures(pid: int) -> tuple[float, int]:
    """(resident MB, open files) of one process, 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            rss = next(int(line.split()[1]) for line in fh if line.startswith(b"VmRSS:"))
        return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, StopIteration):
        return 0.0, 0


def lance_versions(db: Path) -> dict[str, int]:
    """Versions each LanceDB table keeps (a table whose old versions the sink's maintenance
    is deleting at that moment is read again, then left out of this sample)."""
    import lancedb

    if not db.exists():
        return {}
    conn = lancedb.connect(str(db))
    out = {}
    for name in conn.list_tables().tables:
        for _ in range(3):
            try:
                out[name] = len(conn.open_table(name).list_versions())
                break
            except (RuntimeError, OSError, ValueError):
                time.sleep(0.5)
    return out


async def sample(
    fleet: Fleet, lags: LagReader, db: Path, started: float, ended: int
) -> dict[str, Any]:
    """One minute's figures."""
    figures = {
        name: process_figures(w.process.pid)
        for name, w in fleet.workers.items()
        if name not in fleet.stopped
    }
    lag = await lags.read()
    return {
        "minute": round((time.monotonic() - started) / 60, 2),
        "rss_mb": {n: round(rss, 1) for n, (rss, _) in figures.items()},
        "open_files": {n: files for n, (_, files) in figures.items()},
        "lag": {g: v["lag"] for g, v in lag.items()},
        "lance_versions": await asyncio.to_thread(lance_versions, db),
        "tasks_published": ended,
        "exited": [n for n, w in fleet.workers.items() if w.process.poll() is not None],
    }


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run the loop for ``args.minutes`` and sample it every minute."""
    run = f"soak-{new_id()[:8]}"
    settings = Settings().model_copy(update={"topic_prefix": f"{run}."})
    workdir = (settings.home / "soak" / run).resolve()
    workdir.mkdir(parents=True)
    db = workdir / "lancedb"
    profile = PROFILES["tiny"]
    config = trainer_config(workdir, profile, args.tasks_per_min, profile.lr)
    (workdir / "trainer.toml").write_text(config_toml(config))
    env = {**child_env(settings.topic_prefix, workdir, db), "SF_CONTROL": CONTROL}
    fleet = Fleet(workdir / "logs", env)
    await create_topics(settings)
    for name, command in workers(run, workdir, db).items():
        fleet.start(name, command)
    v0 = workdir / "weights" / config.policy_name / "v000000"
    deadline = time.monotonic() + 300
    while not (v0 / "revision.json").exists():
        fleet.check()
        if time.monotonic() > deadline:
            raise SystemExit(f"the trainer announced no v0 in 5 min; read {fleet.log_dir}")
        await asyncio.sleep(1)
    simulate = ["worker", "simulate", "--policy", "hf", "--checkpoint", str(v0)]
    simulate += ["--max-new-tokens", str(profile.max_new_tokens), "--decode", profile.decode]
    simulate += ["--concurrency", "4", "--group", f"{run}-sim", "--warm", ENV, "--timeout", "120"]
    fleet.start("simulate", simulate)
    suite = env_class(ENV).suite()
    samples: list[dict[str, Any]] = []
    published = 0
    started = time.monotonic()
    admin = admin_client(settings)
    await admin.start()
    try:
        async with TopicReader(settings, "soak-lag") as offsets, EventProducer(settings) as out:
            lags = LagReader(settings, admin, offsets)
            gap = 60.0 / args.tasks_per_min
            for minute in range(args.minutes):
                for _ in range(args.tasks_per_min):
                    spec = suite[published % len(suite)]
                    await out.publish(
                        Task(
                            task_id=f"{run}-{published:06d}-{spec.task_id}",
                            env=ENV,
                            spec={"suite_task": spec.task_id, "params": {"shuffle": True}},
                            seed=published,
                            group_id=f"{run}-{published // 4}-{spec.task_id}",
                        )
                    )
                    published += 1
                    await asyncio.sleep(gap)
                samples.append(await sample(fleet, lags, db, started, published))
                print(json.dumps(samples[-1]), flush=True)
                if samples[-1]["exited"]:
                    print(f"minute {minute}: exited {samples[-1]['exited']}; read {fleet.log_dir}")
    finally:
        await admin.close()
        killed = await asyncio.to_thread(fleet.stop)
        if not args.keep:
            await delete_topics_where(settings, lambda t: t.startswith(settings.topic_prefix))
    return {"run": run, "workdir": str(workdir), "samples": samples, "killed_on_stop": killed}


def config_toml(config: Any) -> str:
    """The trainer's TOML (the demo's writer)."""
    from safactory.trainer.config import to_toml

    return to_toml(config)


def summary(samples: list[dict[str, Any]], warmup: float) -> dict[str, dict[str, Any]]:
    """Per figure and series: after warm-up, at the end, and the slope per hour."""
    after = [s for s in samples if s["minute"] >= warmup] or samples
    out: dict[str, dict[str, Any]] = {}
    for figure in ("rss_mb", "open_files", "lag", "lance_versions"):
        names = sorted({n for s in after for n in s[figure]})
        for name in names:
            points = [(s["minute"] * 60, s[figure][name]) for s in after if name in s[figure]]
            if len(points) < 2:
                continue
            out.setdefault(figure, {})[name] = {
                "warm": points[0][1],
                "end": points[-1][1],
                "slope_per_h": round(_slope_per_min(points) * 60, 2),
            }
    return out


def plot(samples: list[dict[str, Any]], png: Path, title: str) -> None:
    """Four panels: memory, open files, lag, table versions, over minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
    labels = {
        "rss_mb": "resident memory (MB)",
        "open_files": "open files",
        "lag": "consumer lag (records)",
        "lance_versions": "LanceDB versions kept",
    }
    for ax, (figure, label) in zip(axes.flat, labels.items(), strict=True):
        for name in sorted({n for s in samples for n in s[figure]}):
            xs = [s["minute"] for s in samples if name in s[figure]]
            ax.plot(xs, [s[figure][name] for s in samples if name in s[figure]], label=name)
        ax.set_title(label)
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.suptitle(title)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--tasks-per-min", type=int, default=24)
    parser.add_argument("--warmup", type=float, default=10.0, help="minutes left out of slopes")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--png", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the run's topics")
    args = parser.parse_args()
    result = asyncio.run(soak(args))
    result["summary"] = summary(result["samples"], args.warmup)
    for figure, series in result["summary"].items():
        for name, f in series.items():
            print(
                f"{figure:<15} {name:<36} warm {f['warm']:>9} end {f['end']:>9} "
                f"slope {f['slope_per_h']:>8}/h"
            )
    exited = sorted({n for s in result["samples"] for n in s["exited"]})
    print(f"workers that exited: {exited or 'none'}; killed on stop: {result['killed_on_stop']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.png:
        plot(
            result["samples"],
            args.png,
            f"bench/soak.py: {args.minutes} min, {args.tasks_per_min} tasks/min ({result['run']})",
        )


if __name__ == "__main__":
    main()
