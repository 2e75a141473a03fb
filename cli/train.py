"""``safactory train``: the streaming RL trainer against the broker, with live metrics."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from aiokafka.errors import KafkaError
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from ..infra import aio
from ..trainer.config import ConfigError, Mode, TrainerConfig
from ..trainer.launch import configure, torchrun_argv
from .errors import broker_failure, get_settings

if TYPE_CHECKING:  # torch and transformers load only when a command needs them
    from ..trainer.learner import Learner
    from ..trainer.stream import StreamingTrainer

console = Console()
err = Console(stderr=True)


def train(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="TOML file with a \\[trainer] table (see trainer/config.py)"
        ),
    ] = None,
    mode: Annotated[
        Mode | None,
        typer.Option(help="async: rollout and training decoupled by Kafka; sync: each waits"),
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or npu")] = None,
    model_name: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="tiny (built from [trainer.model], random init), smollm2-135m "
            "(SmolLM2-135M-Instruct, its tokenizer and chat template) or a local Hugging Face "
            "folder",
        ),
    ] = None,
    max_staleness: Annotated[
        int | None, typer.Option(help="train on a trajectory only if v − m ≤ this (async mode)")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="trajectories per update (minimum)")
    ] = None,
    policy_name: Annotated[
        str | None, typer.Option(help="name announced on the policy topic")
    ] = None,
    weight_dir: Annotated[Path | None, typer.Option(help="weight store root")] = None,
    checkpoint_dir: Annotated[Path | None, typer.Option(help="checkpoints and journal")] = None,
    teacher: Annotated[
        Path | None, typer.Option(help="on-policy distillation teacher (weight-store dir)")
    ] = None,
    distill_coef: Annotated[float | None, typer.Option(help="λ of the distillation term")] = None,
    pure_distill: Annotated[
        bool | None, typer.Option("--pure-distill/--no-pure-distill", help="ignore rewards")
    ] = None,
    max_updates: Annotated[
        int | None, typer.Option(help="stop after this many updates (default: run until stopped)")
    ] = None,
    idle_exit: Annotated[
        float | None, typer.Option(help="stop after this many seconds without new trajectories")
    ] = None,
    live: Annotated[bool, typer.Option("--live/--no-live", help="live metrics table")] = True,
    nproc: Annotated[
        int,
        typer.Option(
            min=1,
            help="ranks on this machine: runs itself under torchrun (gloo on cpu, NCCL on cuda); "
            "rank 0 consumes, checkpoints and announces, every rank computes its share",
        ),
    ] = 1,
    max_restarts: Annotated[
        int, typer.Option(min=0, help="with --nproc > 1: times torchrun restarts a failed group")
    ] = 3,
) -> None:
    """Consume sf.trajectories under the staleness rule, update the policy, publish versions.

    Resumes from the checkpoint in --checkpoint-dir if there is one. Ctrl-C finishes the
    update in hand, checkpoints and exits.
    """
    if nproc > 1 and "LOCAL_RANK" not in os.environ:
        _exec_torchrun(nproc, max_restarts)
    from ..infra.models import ModelError
    from ..trainer import distributed, leading
    from ..trainer.distill import LocalTeacher
    from ..trainer.learner import Learner
    from ..trainer.model import load_policy_model, resolve_placement

    distill = {"teacher": teacher, "coef": distill_coef, "pure": pure_distill}
    try:
        cfg = configure(
            config,
            model_name=model_name,
            distill=distill,
            mode=mode,
            device=device,
            max_staleness=max_staleness,
            batch_size=batch_size,
            policy_name=policy_name,
            weight_dir=weight_dir,
            checkpoint_dir=checkpoint_dir,
        )
        ranks = distributed.Ranks.from_env()
        distributed.init(ranks, cfg.device)
        placement = resolve_placement(cfg)
    except (ConfigError, RuntimeError, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(code=2) from None
    try:
        model, tokenizer = load_policy_model(cfg.model)
    except (ModelError, OSError, ValueError) as exc:
        err.print(f"[red]error:[/red] {escape(f'model.name={cfg.model.name}: {exc}')}")
        raise typer.Exit(code=2) from None
    try:
        teacher_model = (
            LocalTeacher.load(cfg.distill.teacher, tokenizer, placement)
            if cfg.distill.teacher is not None
            else None
        )
    except ValueError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(code=2) from None
    except OSError as exc:
        err.print(
            f"[red]error:[/red] "
            f"{escape(f'distill.teacher={cfg.distill.teacher}: cannot load ({exc})')}"
        )
        raise typer.Exit(code=2) from None
    learner = Learner(model, tokenizer, cfg, placement, teacher=teacher_model, ranks=ranks)
    if ranks.rank != 0:  # a following rank: no Kafka, no checkpoint, no display
        leading.follow(learner)
        return
    if not ranks.distributed:
        aio.run(_run(cfg, learner, max_updates, idle_exit, live))
        return
    leader = leading.RankZeroLearner(learner)
    try:
        aio.run(_run(cfg, leader, max_updates, idle_exit, live))
    finally:
        leader.close()


def _exec_torchrun(nproc: int, max_restarts: int) -> None:
    """Replace this process by ``torchrun`` running this same command on ``nproc`` ranks."""
    argv = torchrun_argv(sys.argv[1:], nproc, max_restarts)
    os.execv(argv[0], argv)


async def _run(
    cfg: TrainerConfig,
    learner: Learner,
    max_updates: int | None,
    idle_exit: float | None,
    live: bool,
) -> None:
    from ..trainer.stream import StreamingTrainer

    settings = get_settings()
    display = Live(console=console, refresh_per_second=4) if live else None
    trainer = StreamingTrainer(
        cfg,
        settings,
        learner,
        on_update=(lambda t: display.update(metrics_table(t)))
        if display
        else (lambda t: console.print(metrics_line(t), highlight=False)),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, trainer.request_stop)
    loop.add_signal_handler(signal.SIGTERM, trainer.request_stop)
    console.print(
        f"training {cfg.policy_name!r} ({cfg.mode}, max_staleness={cfg.effective_staleness}, "
        f"device={cfg.device}) from {settings.topic('trajectories')}; "
        f"checkpoints in {cfg.checkpoint_dir}"
    )
    try:
        if display is not None:
            with display:
                stats = await trainer.run(max_updates=max_updates, idle_timeout=idle_exit)
                display.update(metrics_table(trainer))  # the final counts, skips included
        else:
            stats = await trainer.run(max_updates=max_updates, idle_timeout=idle_exit)
    except (RuntimeError, KafkaError) as exc:
        err.print(
            f"[red]error:[/red] {escape(broker_failure(exc, get_settings().kafka_bootstrap))}"
        )
        raise typer.Exit(code=1) from None
    if display is None:
        console.print(metrics_line(trainer))
    else:
        console.line()
    console.print(
        f"done: version {trainer.version}, {stats.published} announcements, "
        f"{stats.skipped_stale} skipped as stale in this run, {stats.dead_lettered} dead-lettered, "
        f"{stats.held_out} held out (evaluation tasks, never trained on)"
    )


def metrics_line(trainer: StreamingTrainer) -> str:
    """One line of the latest metrics (for logs and --no-live)."""
    m, s = trainer.stats.last_update, trainer.stats
    if m is None:
        skipped = trainer.staleness.skipped_total
        return f"v{trainer.version}: no update yet; {skipped} skipped as stale in total"
    return (
        f"v{trainer.version} reward={m.mean_reward:+.3f} kl={m.behaviour_kl:.4f} "
        f"trajectories={m.trajectories} skipped_total={trainer.staleness.skipped_total} "
        f"staleness={dict(sorted(trainer.staleness.accepted.items()))} "
        f"tokens/s={s.tokens_per_s:,.0f}"
        + (f" teacher_kl={m.teacher_kl:.4f}" if m.teacher_kl is not None else "")
    )


def metrics_table(trainer: StreamingTrainer) -> Table:
    """The live table: progress, reward, KL, staleness histogram, skips, throughput."""
    m, s = trainer.stats.last_update, trainer.stats
    table = Table(title=f"safactory train · {trainer.config.policy_name}", show_header=False)
    table.add_row("version", str(trainer.version))
    counts = (
        f"{trainer.state.trained_total} / {trainer.staleness.skipped_total} / {s.dead_lettered}"
    )
    table.add_row("trained / skipped stale (all runs) / dead-lettered (this run)", counts)
    table.add_row(
        "received / passed over on resume / buffered", f"{s.received} / {s.replayed} / {s.buffered}"
    )
    if trainer.config.vllm.enabled:
        table.add_row("vLLM reload errors", str(s.reload_errors))
    if m is not None:
        table.add_row("mean reward (last update)", f"{m.mean_reward:+.4f}")
        table.add_row("KL(behaviour ‖ current)", f"{m.behaviour_kl:.5f}")
        if m.teacher_kl is not None:
            table.add_row("reverse KL to teacher (est.)", f"{m.teacher_kl:.5f}")
        table.add_row("loss / clip fraction", f"{m.loss:+.4f} / {m.clip_fraction:.3f}")
    table.add_row(
        "staleness histogram (lag: count)", str(dict(sorted(trainer.staleness.accepted.items())))
    )
    table.add_row("skipped by lag", str(dict(sorted(trainer.staleness.skipped.items()))))
    table.add_row("tokens/s", f"{s.tokens_per_s:,.0f}")
    ts = trainer.learner.transformer.stats
    table.add_row(
        "re-tokenise mismatches / prompt mismatches / unrecorded steps / truncated",
        f"{ts.retokenize_mismatches} of {ts.retokenize_checked} / {ts.prompt_mismatches} / "
        f"{ts.unrecorded_steps} / {ts.truncated}",
    )
    return table
