"""How ``safactory train`` starts: its configuration (a TOML file and the command's
options over it); for several ranks on one machine, the ``torchrun`` command line that runs
the same command on each; this rank's learner; and who streams (rank 0) and who follows.

Torch loads only when a function here needs it: the CLI imports this module to start."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..infra import aio
from ..infra.config import Settings
from .config import ConfigError, TrainerConfig, load_config

if TYPE_CHECKING:
    from .distributed import Ranks
    from .learner import Learner
    from .stream import StreamingTrainer


class LaunchError(ValueError):
    """This rank cannot start: the ranks, the device, the model or the teacher; the message
    says which and why."""


def configure(
    path: Path | None,
    *,
    model_name: str | None = None,
    distill: dict[str, object] | None = None,
    **overrides: object,
) -> TrainerConfig:
    """The configuration in ``path`` (or the defaults) with the options given (None: not
    given): ``overrides`` of top-level fields, ``model_name`` for ``model.name`` and
    ``distill`` fields; :class:`ConfigError` or ``ValueError`` when invalid."""
    cfg = load_config(path, **overrides)
    if model_name is not None:
        cfg = TrainerConfig.model_validate(
            cfg.model_dump() | {"model": cfg.model.model_dump() | {"name": model_name}}
        )
    given = {k: v for k, v in (distill or {}).items() if v is not None}
    if given:
        cfg = TrainerConfig.model_validate(
            cfg.model_dump() | {"distill": cfg.distill.model_dump() | given}
        )
    return cfg


def torchrun_argv(argv: list[str], nproc: int, max_restarts: int) -> list[str]:
    """The command line running ``safactory`` with ``argv`` (less ``--nproc`` and
    ``--max-restarts``) under ``torchrun`` on ``nproc`` ranks."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--nproc", "--max-restarts"):
            skip = True
            continue
        if arg.startswith(("--nproc=", "--max-restarts=")):
            continue
        kept.append(arg)
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        "safactory.cli.main",
        *kept,
    ]


def under_torchrun(argv: list[str], nproc: int, max_restarts: int) -> None:
    """With ``nproc`` > 1, outside ``torchrun``: replace this process by ``torchrun``
    running ``safactory ARGV`` on ``nproc`` ranks (within it, or on one rank: return)."""
    if nproc > 1 and "LOCAL_RANK" not in os.environ:
        command = torchrun_argv(argv, nproc, max_restarts)
        os.execv(command[0], command)


def learner(cfg: TrainerConfig) -> tuple[Ranks, Learner]:
    """Join the ranks ``torchrun`` set (else one), load the policy model and the
    distillation teacher if any, and build this rank's learner; :class:`LaunchError`."""
    from ..infra.models import ModelError
    from . import distributed
    from .distill import LocalTeacher
    from .learner import Learner
    from .model import load_policy_model, resolve_placement

    try:
        ranks = distributed.Ranks.from_env()
        distributed.init(ranks, cfg.device)
        placement = resolve_placement(cfg)
    except (ConfigError, RuntimeError, ValueError) as exc:
        raise LaunchError(str(exc)) from None
    try:
        model, tokenizer = load_policy_model(cfg.model)
    except (ModelError, OSError, ValueError) as exc:
        raise LaunchError(f"model.name={cfg.model.name}: {exc}") from None
    teacher = cfg.distill.teacher
    try:
        loaded = None if teacher is None else LocalTeacher.load(teacher, tokenizer, placement)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    except OSError as exc:
        raise LaunchError(f"distill.teacher={teacher}: cannot load ({exc})") from None
    return ranks, Learner(model, tokenizer, cfg, placement, teacher=loaded, ranks=ranks)


Lead = Callable[["Learner"], Coroutine[Any, Any, None]]
"""Rank 0's work with its learner (with several ranks, a ``RankZeroLearner`` in its
place): stream trajectories into it."""


def on_ranks(ranks: Ranks, learner: Learner, lead: Lead) -> None:
    """Rank 0 runs ``lead`` (with several ranks, each update goes to every rank first); the
    other ranks follow rank 0's updates (no Kafka, no checkpoint, no display)."""
    from . import leading

    if ranks.rank != 0:
        leading.follow(learner)
        return
    if not ranks.distributed:
        aio.run(lead(learner))
        return
    leader = leading.RankZeroLearner(learner)
    try:
        aio.run(lead(leader))  # type: ignore[arg-type]
    finally:
        leader.close()


def streaming(
    cfg: TrainerConfig,
    settings: Settings,
    learner: Learner,
    on_update: Callable[[StreamingTrainer], None],
) -> StreamingTrainer:
    """The streaming trainer, stopped by SIGINT or SIGTERM after the update in hand (call
    on the running loop)."""
    from .stream import StreamingTrainer

    trainer = StreamingTrainer(cfg, settings, learner, on_update=on_update)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, trainer.request_stop)
    loop.add_signal_handler(signal.SIGTERM, trainer.request_stop)
    return trainer
