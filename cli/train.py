"""``safactory train``: the streaming RL trainer against the broker, with live metrics."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from aiokafka.errors import KafkaError
from rich.live import Live
from rich.table import Table

from ..trainer import launch, report
from ..trainer.config import Mode, TrainerConfig
from .errors import console, failing, get_settings

if TYPE_CHECKING:  # torch and transformers load only when a command needs them
    from ..trainer.learner import Learner
    from ..trainer.stream import StreamingTrainer


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
    launch.under_torchrun(sys.argv[1:], nproc, max_restarts)
    distill = {"teacher": teacher, "coef": distill_coef, "pure": pure_distill}
    fields = dict(mode=mode, device=device, max_staleness=max_staleness, batch_size=batch_size)
    fields |= dict(policy_name=policy_name, weight_dir=weight_dir, checkpoint_dir=checkpoint_dir)
    with failing(ValueError, code=2):  # ConfigError, LaunchError
        cfg = launch.configure(config, model_name=model_name, distill=distill, **fields)
        ranks, learner = launch.learner(cfg)
    until = {"max_updates": max_updates, "idle_timeout": idle_exit}
    launch.on_ranks(ranks, learner, lambda lead: _run(cfg, lead, live, until))


async def _run(cfg: TrainerConfig, learner: Learner, live: bool, until: dict[str, Any]) -> None:
    """Stream trajectories into ``learner`` until stopped or ``until`` (``max_updates``,
    ``idle_timeout``), showing the metrics live or line by line."""
    settings = get_settings()
    display = Live(console=console, refresh_per_second=4) if live else None
    trainer = launch.streaming(
        cfg,
        settings,
        learner,
        on_update=(lambda t: display.update(metrics_table(t)))
        if display
        else (lambda t: console.print(report.line(t), highlight=False)),
    )
    console.print(report.started(trainer))
    with failing(broker=(RuntimeError, KafkaError)), display if display else nullcontext():
        stats = await trainer.run(**until)
        if display is not None:
            display.update(metrics_table(trainer))  # the final counts, skips included
    if display is None:
        console.print(report.line(trainer))
    else:
        console.line()
    console.print(report.done(trainer, stats))


def metrics_table(trainer: StreamingTrainer) -> Table:
    """The live table (``trainer.report.rows``)."""
    table = Table(title=f"safactory train · {trainer.config.policy_name}", show_header=False)
    for name, value in report.rows(trainer):
        table.add_row(name, value)
    return table
