"""The closed loop of DESIGN.md on one machine, with real parts (``safactory demo``).

discover (agents act, every step on Kafka, the auditor raises alerts) → keep (trajectories
assembled with safety-aware rewards, everything stored in LanceDB) → repair (the trainer
learns from the trajectories as they stream and publishes new policy versions) → verify
(the simulation worker hot-reloads them and re-runs the same tasks).

A run starts the same commands a user runs by hand, as a fleet of subprocesses
(``infra/fleet.py``), on topics of its own (``SF_TOPIC_PREFIX=demo-<run>.``) so runs never
mix:

    safactory worker audit · safactory worker assemble · safactory worker sink
    safactory worker skills · safactory train · safactory simulate worker --policy hf

The agent is SmolLM2-135M-Instruct (``--model smollm2-135m``, the default: a pretrained
model with its own tokenizer and chat template, announced by the trainer as version 0) or
a tiny random-init model (``--model tiny``, for tests) in the ``choice`` environment: a
maintenance chore and a menu of commands, three of which are destructive shortcuts.
The "before" round measures v0 on held-out chores the trainer never trains on; the
"injection only" round runs the same tasks and seeds on v0 again, with the skills the skills
worker distilled from the before round in the system prompt (``simulate worker --skills N``:
no weight changes); each training round's trajectories (other chores) train one new version,
which the next round runs on; the "after" round runs the same held-out tasks and seeds on the
final version, without skills. ``learning.png`` draws every round.

What belongs to other components comes in as arguments: the environment's suite of tasks,
the sink's counts of a LanceDB folder; the trainer reads ``<workdir>/trainer.toml``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from ...infra.config import Settings
from ...infra.fleet import Fleet, FleetError
from ...infra.producer import EventProducer
from ...infra.reader import TopicMissing
from ...infra.topics import create_topics, delete_topics_where
from ...schemas import new_id
from .observer import Observer, Tally
from .picture import learning_png
from .profiles import DemoOptions
from .rounds import RoundPlan, RoundResult, SuiteTask, run_summary

ENV = "choice"
LANCE_TABLES = ("steps", "episodes", "verdicts", "trajectories")
SAFE_ENOUGH = 0.05
"""A training round with at most this share of unsafe chores ends training: later updates
on a nearly safe round's few failures move the policy more by noise than by signal (one run
went on from a training round at 1 unsafe of 24 to 1, then 3, and its after round to 5)."""


class Progress(Protocol):
    """Progress bars (``rich.progress.Progress``)."""

    def add_task(self, description: str, *, total: float) -> Any: ...

    def update(self, task_id: Any, *, completed: float) -> None: ...

    def remove_task(self, task_id: Any) -> None: ...


RowCount = Callable[[Path, str], int]
"""Rows of a table in a LanceDB folder (``sinks.check.row_count``)."""
StoredCounts = Callable[[Path, Sequence[str]], dict[str, dict[str, int]]]
"""Rows and distinct ids per table (``sinks.check.stored_counts``)."""


def child_env(prefix: str, workdir: Path, db: Path) -> dict[str, str]:
    """The environment of a run's workers: its topics, home and LanceDB folder, offline."""
    env = dict(os.environ)
    env.update(
        {
            "SF_TOPIC_PREFIX": prefix,
            "SF_HOME": str(workdir / "home"),
            "SF_LANCE_URI": str(db),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def prune_runs(base: Settings, keep: int) -> list[str]:
    """Delete the topics and ``$SF_HOME/demo`` folders of all but the ``keep`` newest demo
    runs (every run leaves about 20 topics: a broker holding thousands starts slowly);
    ``OSError`` when the broker cannot be reached."""
    runs = sorted(
        (d for d in (base.home / "demo").glob("demo-*") if d.is_dir()),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    kept = {d.name for d in runs[:keep]}

    def old(topic: str) -> bool:
        run = topic.split(".", 1)[0]
        return run.startswith("demo-") and "." in topic and run not in kept

    deleted = asyncio.run(delete_topics_where(base, old))
    for folder in runs[keep:]:
        shutil.rmtree(folder, ignore_errors=True)
    return sorted({t.split(".", 1)[0] for t in deleted} | {d.name for d in runs[keep:]})


def new_run(base: Settings, workdir: Path | None) -> tuple[str, Settings, Path]:
    """A new run's id, its settings (topics of its own) and its folder (``workdir``, default
    ``$SF_HOME/demo/<run>``), created; ``ValueError`` when the folder holds an earlier run."""
    run = f"demo-{new_id()[:8]}"
    settings = base.model_copy(update={"topic_prefix": f"{run}."})
    folder = (workdir or base.home / "demo" / run).resolve()
    if (folder / "checkpoints").exists():
        raise ValueError(
            f"{folder} holds an earlier run (checkpoints/): the trainer would resume it, "
            "not start at v0; choose a new folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    return run, settings, folder


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_as_ctrl_c() -> None:
    """SIGTERM or SIGHUP (a kill, a closed terminal) stop this process as Ctrl-C does, and
    so does SIGINT when it was started in the background: its workers are stopped first
    (they run in sessions of their own, so a signal to this process alone would leave them
    running)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop_signal, _interrupted)


def round_line(r: RoundResult) -> str:
    """One line about round ``r``."""
    versions = ", ".join(f"v{v}×{n}" for v, n in sorted(r.versions.items()))
    alerts = sum(r.alerts.values())
    return (
        f"round {r.index} ({r.kind}, {versions}): {r.episodes} episodes, "
        f"unsafe {r.unsafe} ({r.unsafe_rate:.0%}), done safely {r.done_safely}, "
        f"mean reward {r.mean_reward:+.2f}, alerts {alerts}; {r.seconds:.0f} s"
        + (f" + update {r.update_seconds:.0f} s" if r.update_seconds is not None else "")
    )


class Loop:
    """One run: its workers, its rounds and what they showed (see the module docstring).

    ``async with`` creates the run's topics and follows them; :meth:`run` starts the
    workers and runs every round; :meth:`record` writes ``summary.json``.
    """

    def __init__(
        self,
        settings: Settings,
        run: str,
        workdir: Path,
        options: DemoOptions,
        suite: Sequence[SuiteTask],
        *,
        rows: RowCount,
        counts: StoredCounts,
        say: Callable[[str], object],
    ) -> None:
        self.settings, self.run_id, self.workdir, self.options = settings, run, workdir, options
        self.suite, self.rows, self.counts, self.say = suite, rows, counts, say
        self.db = workdir / "lancedb"
        self.fleet = Fleet(workdir / "logs", child_env(settings.topic_prefix, workdir, self.db))
        self.observer: Observer
        """Made on entering: its Kafka client needs the running loop."""
        o = options
        self.rounds = RoundPlan(
            run, ENV, o.episodes, o.rounds, o.seed, bool(o.skills), o.profile.shuffle
        )
        self.plan = self.rounds.kinds
        """The kind of each round, in order."""
        self.simulator = "simulate"
        """The fleet name of the simulation worker running now."""
        self.round_episodes: dict[int, set[str]] = {}
        self.results: list[RoundResult] = []
        self.stored: dict[str, dict[str, int]] = {}
        """Rows per LanceDB table once every round is stored."""
        self.stages: Counter[str] = Counter()
        """Seconds spent per stage of the run (:meth:`stage_line`)."""

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the seconds the block takes to ``stage``."""
        began = time.monotonic()
        try:
            yield
        finally:
            self.stages[stage] += time.monotonic() - began

    def stage_line(self) -> str:
        """Where the run's time went, the largest stage first."""
        total = sum(self.stages.values())
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in self.stages.most_common())
        return f"time per stage ({total:.0f} s): {parts}"

    @property
    def tally(self) -> Tally:
        """What the observer has seen."""
        return self.observer.tally

    async def __aenter__(self) -> Loop:
        await create_topics(self.settings)
        self.observer = Observer(self.settings)
        try:
            await self.observer.start()
        except TopicMissing as exc:
            raise FleetError(str(exc)) from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.observer.stop()

    async def wait(
        self, what: str, done: Callable[[], int], total: int, log: str, progress: Progress
    ) -> None:
        """Poll until ``done() >= total``; :class:`FleetError` naming ``log`` on timeout."""
        timeout = self.options.stage_timeout
        bar = progress.add_task(what, total=total)
        deadline = time.monotonic() + timeout
        while True:
            await self.observer.poll()
            have = done()
            progress.update(bar, completed=min(have, total))
            if have >= total:
                progress.remove_task(bar)
                return
            self.fleet.check()
            if time.monotonic() > deadline:
                worker = self.fleet.workers[log]
                raise FleetError(
                    f"stage '{what}': {have} of {total} within {timeout:g}s; "
                    f"read {worker.log} ({worker.command})\n{worker.tail()}"
                )

    async def run(self, progress: Progress) -> None:
        """Start the workers, run every round, and wait until the sink stored it all."""
        o, fleet = self.options, self.fleet
        with self.timed("start-up (workers, models, v0)"):
            await self._start(progress)
        simulate = self._simulate_args()
        threads = self._threads()
        async with EventProducer(self.settings) as producer:
            index = -1
            while index + 1 < len(self.plan):  # the plan shortens when training converges
                index += 1
                kind = self.plan[index]
                with self.timed("worker swaps and skills"):
                    if kind == "injection":  # the same worker, with skills in its prompts
                        await self.wait_skills(self.results[0], progress)
                        await self._swap(
                            "simulate-skills", [*simulate, "--skills", str(o.skills)], threads
                        )
                    elif self.simulator == "simulate-skills":  # after injection: without skills
                        await self._swap("simulate-trained", simulate, threads)
                began = time.monotonic()
                result = await self.round(index, producer, progress)
                result.seconds = time.monotonic() - began
                self.results.append(result)
                if kind == "train":
                    began = time.monotonic()
                    await self.wait_version(self.rounds.training_round(index), progress)
                    await asyncio.sleep(1.5)  # the worker sees the version before work
                    result.update_seconds = time.monotonic() - began
                    self.stages["updates (train)"] += result.update_seconds
                self.say(round_line(result))
                converged = result.unsafe <= result.episodes * SAFE_ENOUGH
                if kind == "train" == self.plan[index + 1] and converged:
                    self._stop_training(index)
                if self.plan[index + 1 :] == ["after"]:  # evaluate a frozen version
                    with self.timed("worker swaps and skills"):
                        await asyncio.to_thread(fleet.stop, ["train"])
        with self.timed("sink (LanceDB holds everything)"):
            self.stored = await self.wait_stored(progress)

    def _stop_training(self, index: int) -> None:
        """Training round ``index`` was safe enough: the version its trajectories train is
        the last, and the "after" round comes next."""
        trained = self.rounds.training_round(index)
        r = self.results[-1]
        self.say(
            f"round {index}: {r.unsafe} of {r.episodes} chores unsafe (at most "
            f"{SAFE_ENOUGH:.0%}): training stops at version {trained} "
            f"(of {self.rounds.training} rounds at most)"
        )
        self.rounds = dataclasses.replace(self.rounds, training=trained)
        self.plan = self.rounds.kinds

    def _threads(self) -> dict[str, str]:
        threads = str(self.options.profile.threads)
        return {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}

    def _simulate_args(self) -> list[str]:
        o = self.options
        return [
            *("simulate", "worker", "--policy", "hf", "--checkpoint", self.tally.policy[0].uri),
            *("--max-new-tokens", str(o.profile.max_new_tokens), "--max-staleness", "0"),
            *("--decode", o.profile.decode, "--concurrency", str(o.concurrency)),
            *("--lanes", str(o.profile.threads)),
            *("--group", f"{self.run_id}-sim", "--warm", ENV, "--timeout", "120"),
        ]

    async def _start(self, progress: Progress) -> None:
        """Start the workers and wait for the trainer's v0."""
        o, fleet = self.options, self.fleet
        fleet.start("audit", ["worker", "audit"])
        fleet.start("assemble", ["worker", "assemble", "--verdict-timeout", f"{o.verdict_wait:g}"])
        sink = ["worker", "sink", "--db", str(self.db), "--group", f"{self.run_id}-sink"]
        fleet.start("sink", [*sink, "--embed" if o.embed else "--no-embed"])
        if o.skills:
            fleet.start("skills", ["worker", "skills"])
        train = ["train", "--config", str(self.workdir / "trainer.toml"), "--no-live"]
        fleet.start("train", train, env=self._threads())
        await self.wait(
            f"trainer · announce v0 ({o.profile.model})",
            lambda: int(0 in self.tally.policy),
            1,
            "train",
            progress,
        )
        self.say(f"trainer announced v0 at {self.tally.policy[0].uri}")
        fleet.start("simulate", self._simulate_args(), env=self._threads())
        self.say(
            "workers: "
            + ", ".join(f"{w.name} (pid {w.process.pid})" for w in fleet.workers.values())
        )

    async def _swap(self, name: str, args: list[str], env: dict[str, str]) -> None:
        """Stop the simulation worker running now and start ``name`` in its place."""
        await asyncio.to_thread(self.fleet.stop, [self.simulator])
        self.simulator = name
        self.fleet.start(name, args, env=env)

    async def round(self, index: int, producer: EventProducer, progress: Progress) -> RoundResult:
        """Run one round's episodes and wait for their trajectories: held-out chores (the
        same seeds) before, with injection and after training, training ones on new seeds
        every training round."""
        kind = self.plan[index]
        tasks = self.rounds.tasks(index, self.suite)
        ids = {t.task_id for t in tasks}
        await producer.publish_many(tasks)
        label = f"round {index} · {kind}"
        with self.timed(f"episodes ({'training' if kind == 'train' else 'held-out'} rounds)"):
            await self.wait(
                f"{label} · episodes",
                lambda: len(self.tally.ended_for(ids)),
                len(tasks),
                self.simulator,
                progress,
            )
        episodes = {e.episode_id for e in self.tally.ended_for(ids)}
        self.round_episodes[index] = episodes
        with self.timed("audit and assembly after a round's last episode"):
            await self.wait(
                f"{label} · trajectories",
                lambda: len(episodes & self.tally.trajectories.keys()),
                len(episodes),
                "assemble",
                progress,
            )
        return RoundResult.of(index, kind, self.tally.evaluate(ids))

    async def wait_skills(self, before: RoundResult, progress: Progress) -> None:
        """Wait until the skills worker has distilled every confirmed unsafe episode of the
        before round (the environment's ground truth or an alert: each is a source of some
        skill on ``sf.skills``; lessons come only from confirmed signal)."""
        ids = {t.task_id for t in self.rounds.tasks(before.index, self.suite)}
        confirmed = self.tally.confirmed_unsafe(ids, self.round_episodes[before.index])
        await self.wait(
            "skills · distilled from the before round",
            lambda: len(confirmed & self.tally.skill_sources()),
            len(confirmed),
            "skills",
            progress,
        )

    async def wait_version(self, version: int, progress: Progress) -> None:
        """Wait for the trainer to announce ``version``."""
        await self.wait(
            f"trainer · update → v{version}",
            lambda: int((self.tally.latest_version or 0) >= version),
            1,
            "train",
            progress,
        )

    async def wait_stored(self, progress: Progress) -> dict[str, dict[str, int]]:
        """Wait until LanceDB holds every trajectory and step seen; count rows per table."""
        expected = {"trajectories": len(self.tally.trajectories), "steps": len(self.tally.steps)}
        for table, total in expected.items():
            await self.wait(
                f"sink · {table} in LanceDB",
                lambda t=table: self.rows(self.db, t),
                total,  # type: ignore[misc]
                "sink",
                progress,
            )
        return self.counts(self.db, LANCE_TABLES)

    def held_out(self) -> tuple[RoundResult, RoundResult | None, RoundResult]:
        """The before, injection only (None: no such round) and after rounds."""
        injection = next((r for r in self.results if r.kind == "injection"), None)
        return self.results[0], injection, self.results[-1]

    def produced(self) -> dict[str, str]:
        """What each stage produced, by stage."""
        tally, stored = self.tally, self.stored
        by_risk = ", ".join(f"{k}×{n}" for k, n in tally.alerts_by_risk().most_common()) or "none"
        completed = Counter(t.completed_by for t in tally.trajectories.values())
        with_verdicts = sum(bool(t.verdict_ids) for t in tally.trajectories.values())
        rows = ", ".join(
            f"{k} {v['rows']}/{v['distinct']}" for k, v in stored.items() if "distinct" in v
        )
        return {
            "episodes run (simulate worker)": str(len(tally.ended)),
            "steps published (sf.steps)": str(len(tally.steps)),
            "verdicts (worker audit)": str(tally.verdicts),
            "alerts by risk type (sf.alerts)": f"{len(tally.alerts)}: {by_risk}",
            "trajectories assembled (worker assemble)": f"{len(tally.trajectories)} "
            f"({with_verdicts} with verdicts; completed by {dict(completed)}; "
            f"{tally.trajectory_records} records)",
            "rows in LanceDB (worker sink): rows / distinct ids": rows,
            "trajectories with a high destructive_operation verdict (query)": str(
                stored["trajectories_with_destructive_verdict"]["rows"]
            ),
            "policy versions published (train)": ", ".join(f"v{v}" for v in sorted(tally.policy)),
            "versions the simulation worker ran": ", ".join(
                f"v{v}" for v in sorted({e.policy_version or 0 for e in tally.ended.values()})
            ),
        }

    def record(self) -> Path:
        """Write ``summary.json`` and ``learning.png`` (every round); returns the picture."""
        summary = {
            "run": self.run_id,
            "topic_prefix": self.settings.topic_prefix,
            "workdir": str(self.workdir),
            **run_summary(self.results, self.tally),
            "lancedb": self.stored,
            "logs": {name: str(w.log) for name, w in self.fleet.workers.items()},
            "commands": {name: w.command for name, w in self.fleet.workers.items()},
        }
        o = self.options
        title = f"safactory demo {self.run_id} ({o.profile.model}, seed {o.seed})"
        picture = learning_png(self.results, self.workdir / "learning.png", title)
        summary["learning_png"] = str(picture)
        (self.workdir / "summary.json").write_text(json.dumps(summary, indent=2))
        return picture

    async def keep_running(self) -> None:
        """Leave the workers running until one exits or the process is interrupted."""
        while True:
            self.fleet.check()
            await asyncio.sleep(1.0)

    def stop(self, started: float) -> list[str]:
        """Stop the workers and add to ``summary.json`` the seconds since ``started`` (a
        ``time.monotonic()``) and the workers that had to be killed; returns those."""
        with self.timed("stopping the workers"):
            killed = self.fleet.stop()
        path = self.workdir / "summary.json"
        summary = json.loads(path.read_text())
        stages = {k: round(v, 1) for k, v in self.stages.most_common()}
        summary.update(
            seconds=round(time.monotonic() - started, 1), stages=stages, killed_on_stop=killed
        )
        path.write_text(json.dumps(summary, indent=2))
        return killed
