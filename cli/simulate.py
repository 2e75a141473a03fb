"""``safactory simulate``: run agents in environments, every step on Kafka.

``run`` enqueues tasks on ``sf.tasks`` and works them off with a local worker (other
workers in the same group share the queue), showing progress from ``sf.episodes``.
``worker`` joins the worker group and runs whatever tasks arrive. ``envs`` lists the
environments and their suites.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Annotated, Any

import typer
from rich.progress import TextColumn, TimeElapsedColumn
from rich.table import Table

from ..agents.attacks import attack_plan
from ..agents.env import EnvError
from ..agents.guard import Guard, Guards, PatternGuard
from ..agents.local_run import Shown, run_here
from ..agents.policies import Policy, PolicyError, policy_config
from ..agents.registry import env_class, env_names, suite_sizes
from ..agents.worker import DEFAULT_GROUP, SimulationWorker
from ..infra.config import Settings
from ..infra.staleness import StalenessController
from ..schemas import EpisodeEnded
from ..streams.evaluation import evaluate
from . import options as opt
from .errors import console, fail, failing, get_settings, progress

app = typer.Typer(
    help="Run agents in environments; every step goes to sf.steps.", no_args_is_help=True
)


def chosen_guard(kind: str | None, patterns: list[str] | None) -> Guard | None:
    """The guard ``--guard`` and ``--guard-pattern`` ask for (both: the first to block wins)."""
    if kind not in (None, "audit"):
        raise fail(f"--guard {kind!r}: unknown; use --guard audit (or --guard-pattern REGEX)")
    guards: list[Guard] = [PatternGuard(patterns)] if patterns else []
    if kind == "audit":
        from ..streams.audit.guard import AuditGuard

        guards.append(AuditGuard())
    return Guards(guards) if len(guards) > 1 else (guards[0] if guards else None)


def simulation(options: Mapping[str, Any]) -> Callable[..., SimulationWorker]:
    """The simulation worker that a command's options (by parameter name, as
    :mod:`.options` declares them) ask for, given the settings and the policy it acts with.
    Its admission: the version rule, and the capacity rule when the trainer's batch size is
    given (``infra.staleness``)."""
    concurrency = options["concurrency"]
    staleness = StalenessController(
        options["max_staleness"],
        concurrency,
        batch_size=options["trainer_batch_size"],
        workers=options["workers"],
    )
    return functools.partial(
        SimulationWorker,
        concurrency=concurrency,
        pool_size=options["pool_size"],
        group_id=options["group"],
        staleness=staleness,
        guard=chosen_guard(options["guard"], options["guard_pattern"]),
        episode_timeout_s=options["timeout"],
    )


@contextlib.asynccontextmanager
async def with_skills(policy: Policy, k: int, settings: Settings) -> AsyncIterator[Policy]:
    """``policy``, or with ``k`` > 0 that policy injecting the ``k`` skills most similar to
    each task, from a library that follows ``sf.skills`` while the context is open."""
    if not k:
        yield policy
        return
    from ..agents.skills import SkillfulPolicy
    from ..infra.embedding import MiniLM
    from ..streams.skills import SkillFollower, SkillLibrary

    async with SkillFollower(settings, SkillLibrary(MiniLM())) as follower:
        yield SkillfulPolicy(policy, follower.library, k)


@app.command("envs")
def envs() -> None:
    """List the registered environments and their task suites."""
    table = Table("env", "tasks", "capability", "safety", "module")
    for name in env_names():
        sizes = (str(n) for n in suite_sizes(name))
        table.add_row(name, *sizes, env_class(name).__module__)
    console.print(table)


@app.command("run")
def run(
    env: Annotated[str, typer.Option(help=f"environment: one of {', '.join(env_names())}")],
    tasks: Annotated[int, typer.Option(min=1, help="episodes to run (cycling the suite)")] = 50,
    concurrency: opt.ConcurrencyOpt = 8,
    policy: opt.PolicyOpt = "careful",
    model: opt.ModelOpt = None,
    base_url: opt.BaseUrlOpt = None,
    checkpoint: opt.CheckpointOpt = None,
    policy_version: opt.VersionOpt = 0,
    record_tokens: opt.RecordOpt = False,
    max_new_tokens: opt.MaxNewTokensOpt = 64,
    temperature: opt.TemperatureOpt = 1.0,
    decode: opt.DecodeOpt = "auto",
    device: opt.DeviceOpt = "cpu",
    lanes: opt.LanesOpt = 1,
    kind: Annotated[
        list[str] | None,
        typer.Option(help="task kinds to run: capability and/or safety (repeatable; default both)"),
    ] = None,
    attack: Annotated[
        str | None,
        typer.Option(
            help="injector for every task: indirect_prompt_injection, misleading, perturbation, "
            "jailbreak"
        ),
    ] = None,
    attack_step: Annotated[
        int | None,
        typer.Option(help="step whose output the injector alters (default: first tool result)"),
    ] = None,
    attack_param: Annotated[
        list[str] | None,
        typer.Option(help="injector parameter KEY=VALUE (repeatable), e.g. strategy=escalation"),
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of the first task (then +1 each)")] = 0,
    pool_size: Annotated[
        int | None, typer.Option(help="pre-warmed environments (default: the concurrency)")
    ] = None,
    group: opt.GroupOpt = DEFAULT_GROUP,
    timeout: opt.TimeoutOpt = 300.0,
    max_staleness: opt.StaleOpt = 2,
    trainer_batch_size: opt.TrainerBatchOpt = None,
    workers: opt.WorkersOpt = 1,
    guard: opt.GuardKindOpt = None,
    guard_pattern: opt.GuardOpt = None,
    skills: opt.SkillsOpt = 0,
) -> None:
    """Enqueue TASKS episodes of ENV on sf.tasks and run them here with a progress bar."""
    if env not in env_names():
        raise fail(f"--env {env!r}: unknown; choose one of {', '.join(env_names())}")
    kinds = kind or ["capability", "safety"]
    if bad := set(kinds) - {"capability", "safety"}:
        raise fail(f"--kind {sorted(bad)}: use capability or safety")
    with failing(PolicyError):
        config = policy_config(locals())
    with failing(EnvError):
        plan = attack_plan(attack, attack_step, attack_param)
    worker = simulation(locals())
    logging.basicConfig(level=logging.WARNING)
    settings = get_settings()
    here = run_here(
        settings,
        env,
        tasks,
        config,
        kinds=kinds,
        attack=plan,
        seed=seed,
        worker=lambda acting: worker(settings, acting),
        acting=lambda policy: with_skills(policy, skills, settings),
        status=console.status,
        display=_progress,
    )
    with failing(EnvError, PolicyError, broker=OSError):
        ended = asyncio.run(here)
    _summary(ended)


@contextlib.contextmanager
def _progress(title: str, count: int) -> Iterator[Shown]:
    """A progress bar of the run's ended and unsafe episodes while inside."""
    unsafe = TextColumn("unsafe {task.fields[unsafe]}")
    with progress(unsafe, TimeElapsedColumn(), console=console) as bars:
        bar = bars.add_task(title, total=count, unsafe=0)

        def shown(ended: list[EpisodeEnded]) -> None:
            unsafe = sum(bool(e.safety and e.safety.unsafe) for e in ended)
            bars.update(bar, completed=len(ended), unsafe=unsafe)

        yield shown


def _summary(ended: list[EpisodeEnded]) -> None:
    run = evaluate(ended)
    violations = run.violation_kinds()
    outcomes = ("success", "failure", "truncated", "error", "abandoned")
    table = Table("episodes", *outcomes, "unsafe", "steps")
    counts = (run.episodes, *(run.outcomes.get(k, 0) for k in outcomes), run.unsafe, run.steps)
    table.add_row(*(str(n) for n in counts))
    console.print(table)
    if violations:
        console.print("violations: " + ", ".join(f"{k}×{n}" for k, n in violations.most_common()))
