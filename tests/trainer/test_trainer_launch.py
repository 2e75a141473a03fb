"""How ``safactory train`` starts: options over the configuration file, and the
``torchrun`` command line of a multi-rank run."""

from __future__ import annotations

import sys
from pathlib import Path

from safactory.trainer.launch import configure, torchrun_argv


def test_options_override_the_file_and_unset_ones_keep_it(tmp_path: Path) -> None:
    path = tmp_path / "trainer.toml"
    path.write_text(
        '[trainer]\nbatch_size = 7\npolicy_name = "p"\n\n[trainer.distill]\ncoef = 0.5\n'
    )
    cfg = configure(path, model_name="tiny", distill={"coef": None, "pure": True}, batch_size=None)
    assert (cfg.batch_size, cfg.policy_name, cfg.model.name) == (7, "p", "tiny")
    assert (cfg.distill.coef, cfg.distill.pure) == (0.5, True)
    assert configure(path, batch_size=3).batch_size == 3


def test_torchrun_runs_the_same_command_without_the_rank_options() -> None:
    argv = ["train", "--nproc", "2", "--no-live", "--max-restarts=1", "-c", "t.toml"]
    assert torchrun_argv(argv, 2, 1) == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=1",
        "-m",
        "safactory.cli.main",
        "train",
        "--no-live",
        "-c",
        "t.toml",
    ]
