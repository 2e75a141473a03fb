"""``safactory worker NAME``: every stream worker, run the same way on the runtime.

Each command reads its options, builds the worker's function from its component and hands
it to the runtime (``infra/processor.py``); SIGINT / SIGTERM stop it cleanly, and its
process ends without the shared libraries' teardown (:mod:`..infra.teardown`). ``safactory
simulate worker`` is ``worker simulate`` under its older name. The trainer is started from
here too (``worker train`` is ``safactory train``) but is no worker of the runtime: it keeps
its own offset ledger with its checkpoints (``trainer/stream.py`` says why).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Annotated

import typer

from ..agents.control import ControlFollower
from ..agents.env import EnvError
from ..agents.policies import PolicyError, make_policy, policy_config
from ..agents.registry import env_names
from ..agents.worker import DEFAULT_GROUP
from ..infra import aio
from ..infra.teardown import skip_teardown
from . import options as opt
from . import simulate as sim
from .errors import console, fail, failing, get_settings
from .options import lance_location

app = typer.Typer(help="Run the factory's stream workers.", no_args_is_help=True)
app.callback()(skip_teardown)
LogLevelOption = Annotated[
    str, typer.Option(envvar="SF_LOG_LEVEL", help="worker log level (info for details)")
]
IdleOpt = Annotated[
    float | None, typer.Option(help="exit after this many idle seconds (backfills)")
]
GROUP_HELP = "consumer group (scoped by the topic prefix: NAME-<prefix> unless it is sf.)"


@app.command("audit")
def audit(
    checkers: opt.CheckersOption = None,
    context_limit: Annotated[int, typer.Option(help="steps of context kept per episode")] = 32,
    context_ttl: Annotated[
        float, typer.Option(help="seconds an episode's context is kept after its last step")
    ] = 3600.0,
    judge_timeout: opt.JudgeTimeoutOption = 2.0,
    shed_after: Annotated[
        float,
        typer.Option(
            min=0,
            help="a step that waited longer than this many seconds is judged "
            "by rules and heuristics only, its model checkers marked 'not run' "
            "(0: never shed; the worker then falls behind under overload)",
        ),
    ] = 30.0,
    log_level: LogLevelOption = "warning",
) -> None:
    """Run the live auditor: steps topic in, verdicts and alerts out."""
    from ..streams.audit.engine import configured_engine
    from ..streams.audit.worker import AuditWorker

    with failing(ValueError):
        engine = configured_engine(checkers, judge_timeout)
    worker = AuditWorker(
        engine,
        get_settings(),
        context_limit=context_limit,
        context_ttl_s=context_ttl,
        shed_after_s=shed_after or None,
    )
    worker.run(log_level)


@app.command("control")
def control(log_level: LogLevelOption = "warning") -> None:
    """Turn verdicts into halt / pause decisions on sf.control by the config's control rules.

    Rules come from the TOML config's control table (rules = [{command = "halt",
    min_severity = "critical"}]) or SF_CONTROL as JSON; without any it publishes nothing."""
    from pydantic import ValidationError

    from ..streams.control.worker import control_runtime, policy_of

    settings = get_settings()
    try:
        policy = policy_of(settings)
    except ValidationError as exc:
        raise fail(f"the control rules of the config: {exc}") from None
    if not policy.rules:
        console.print("[yellow]no control rules configured: no episode will be stopped[/]")
    control_runtime(settings, policy).run(log_level)


@app.command("sink")
def sink(
    db: opt.DbOption = None,
    group: Annotated[
        str, typer.Option(help="consumer group, one per database (scoped by the topic prefix)")
    ] = "safactory-sink",
    embed: Annotated[
        bool, typer.Option(help="embed step and skill text with MiniLM for --like search")
    ] = True,
    max_records: Annotated[
        int, typer.Option(min=1, help="most records per write (one LanceDB commit per table)")
    ] = 5000,
    gather: Annotated[
        float, typer.Option(min=0, help="seconds a record may wait for others to share a write")
    ] = 2.0,
    maintain_every: Annotated[
        float, typer.Option(min=1, help="seconds between compaction / index / cleanup passes")
    ] = 60.0,
    keep_versions: Annotated[
        float, typer.Option(min=0, help="minutes of untagged table versions kept by cleanup")
    ] = 10.0,
    idle_exit: IdleOpt = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log every batch")] = False,
) -> None:
    """Store steps, episodes, verdicts, trajectories, scores and skills in LanceDB.

    Each event once (idempotent on the event id); records are gathered into few large
    writes, offsets are committed only after a write is durable; indexes, compaction and
    cleanup of untagged old versions run periodically. SIGINT / SIGTERM stop it cleanly.
    """
    from datetime import timedelta

    from ..infra.embedding import MiniLM as MiniLMEmbedder
    from ..sinks.options import SinkOptions
    from ..sinks.worker import run_sink

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    options = SinkOptions(
        db_path=lance_location(db),
        group_id=group,
        max_records=max_records,
        gather_s=gather,
        maintain_every_s=maintain_every,
        keep_versions=timedelta(minutes=keep_versions),
        idle_timeout_s=idle_exit,
    )
    embedder = MiniLMEmbedder() if embed else None
    with failing(ValueError):
        result = aio.run(run_sink(get_settings(), options, embedder))
    console.print(f"sink stopped: {result.stats}")


@app.command("assemble")
def assemble(
    verdict_timeout: Annotated[
        float, typer.Option(help="seconds after an episode ends to wait for its verdicts")
    ] = 30.0,
    episode_timeout: Annotated[
        float, typer.Option(help="seconds of silence before an unended episode is abandoned")
    ] = 900.0,
    require_verdicts: Annotated[
        bool, typer.Option(help="wait for episode-level verdicts (off: complete at the end)")
    ] = True,
    checker: Annotated[
        list[str] | None,
        typer.Option(help="a checker whose episode verdict is required (repeatable; default any)"),
    ] = None,
    rule: Annotated[
        Path | None,
        typer.Option(
            help='JSON file of the reward rule: {"rule": NAME, ...its parameters} (default rule '
            "outcome-minus-safety, parameters the fields of RewardRule)"
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="info-level logs")] = False,
) -> None:
    """Assemble reward-complete trajectories onto sf.trajectories.

    Folds steps, episode events and verdicts; keyed by group id, sf-policy-version = the
    oldest version in the trajectory; unended episodes are closed as abandoned.
    """
    from ..streams.assembly import AssemblerConfig, RewardRule
    from ..streams.assembly.reward import reward_rule_from_file
    from ..streams.assembly.worker import AssemblerWorker

    try:
        reward_rule = RewardRule() if rule is None else reward_rule_from_file(rule)
    except ValueError as exc:
        raise fail(f"--rule {exc}") from None
    config = AssemblerConfig(
        reward_rule=reward_rule,
        require_verdicts=require_verdicts,
        required_checkers=frozenset(checker or ()),
        verdict_timeout_s=verdict_timeout,
        episode_timeout_s=episode_timeout,
    )
    AssemblerWorker(get_settings(), config).run("info" if verbose else "warning")


@app.command("score")
def score(
    model: Annotated[
        Path | None,
        typer.Option(
            help="local Hugging Face causal LM folder for perplexity and IFD "
            "(default: no LM components)"
        ),
    ] = None,
    group: Annotated[str, typer.Option(help=GROUP_HELP)] = "safactory-scorer",
    idle_exit: IdleOpt = None,
) -> None:
    """Score trajectories' data value onto sf.scores.

    Components: quality, complexity, IFD (with --model), novelty, safety; and a composite.
    """
    from ..infra.embedding import MiniLM
    from ..streams.scoring.worker import run_scorer

    lm = None
    if model is not None:
        from ..streams.scoring.perplexity import LMScorer

        if not (model / "config.json").is_file():
            raise fail(f"--model {model}: no config.json there; give a saved HF model folder")
        lm = LMScorer.load(model)
    stats = aio.run(
        run_scorer(get_settings(), MiniLM(), lm, group_id=group, idle_timeout_s=idle_exit)
    )
    console.print(f"scorer stopped: {stats}")


@app.command("skills")
def skills(
    group: Annotated[str, typer.Option(help=GROUP_HELP)] = "safactory-skills",
    max_waiting: Annotated[
        int,
        typer.Option(
            min=1,
            help="episodes per partition that may wait for their verdicts or trajectory; "
            "past that the oldest is distilled with what it has",
        ),
    ] = 10_000,
    merge_above: Annotated[
        float, typer.Option(help="cosine similarity above which two lessons are one skill")
    ] = 0.9,
    idle_exit: IdleOpt = None,
) -> None:
    """Distil skills from failed and unsafe trajectories onto sf.skills.

    Lessons come from verdict evidence and the step that went wrong; near-duplicates (by
    embedding) merge into one skill. A trajectory waits for every verdict it names.
    """
    from ..infra.embedding import MiniLM
    from ..streams.skills.library import SkillLibrary
    from ..streams.skills.worker import run_skills

    library = SkillLibrary(MiniLM(), merge_above=merge_above)
    run = run_skills(
        get_settings(), library, group_id=group, max_waiting=max_waiting, idle_timeout_s=idle_exit
    )
    worker = aio.run(run)
    console.print(f"skills worker stopped: {worker.stats}, published {worker.published}")


@app.command("simulate")
def simulate(
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
    warm: Annotated[
        list[str] | None,
        typer.Option(
            help="environments to pre-warm at start (repeatable); others warm on first use"
        ),
    ] = None,
    pool_size: Annotated[
        int | None, typer.Option(help="pre-warmed environments per env (default: the concurrency)")
    ] = None,
    group: opt.GroupOpt = DEFAULT_GROUP,
    timeout: opt.TimeoutOpt = 300.0,
    max_staleness: opt.StaleOpt = 2,
    trainer_batch_size: opt.TrainerBatchOpt = None,
    workers: opt.WorkersOpt = 1,
    guard: opt.GuardKindOpt = None,
    guard_pattern: opt.GuardOpt = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option(help="exit after this many seconds without tasks (default: run until Ctrl-C)"),
    ] = None,
    skills: opt.SkillsOpt = 0,
    control: opt.ControlOpt = True,
) -> None:
    """Join the worker group on sf.tasks and run every task that arrives."""
    skip_teardown()  # also under its older name, ``safactory simulate worker``
    with failing(PolicyError):
        config = policy_config(locals())
    for name in warm or []:
        if name not in env_names():
            raise fail(f"--warm {name!r}: unknown env; choose from {', '.join(env_names())}")
    simulation = sim.simulation(locals())
    logging.basicConfig(level=logging.INFO)

    async def main() -> None:
        settings = get_settings()
        follower = ControlFollower(settings) if control else contextlib.nullcontext()
        async with (
            sim.with_skills(make_policy(config), skills, settings) as acting,
            follower as followed,
        ):
            worker = simulation(
                settings,
                acting,
                control=followed,
                on_done=lambda r: console.print(
                    f"{r.env} {r.task_id} {r.outcome.value} "
                    f"unsafe={bool(r.judgement and r.judgement.safety.unsafe)}"
                ),
            )
            await worker.start()
            try:
                for name in warm or []:
                    await worker.pool(name).start()
                console.print(f"worker {worker.worker_id} in group {group!r}; waiting for tasks")
                await worker.run(idle_timeout=idle_timeout)
            finally:
                await worker.stop()

    try:
        with failing(EnvError, PolicyError, broker=OSError):
            aio.run(main())
    except KeyboardInterrupt:
        console.print("stopped")


sim.app.command("worker")(simulate)  # ``safactory simulate worker``: the same command
