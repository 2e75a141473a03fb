"""How ``safactory train`` starts: its configuration (a TOML file and the command's
options over it) and, for several ranks on one machine, the ``torchrun`` command line that
runs the same command on each."""

from __future__ import annotations

import sys
from pathlib import Path

from .config import TrainerConfig, load_config


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
