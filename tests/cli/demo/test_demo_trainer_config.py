"""The demo's trainer configuration is a TrainerConfig built in code and written as TOML that
the trainer reads back equal (it was an f-string template: a value that needed quoting or a
renamed key broke the demo only when it ran)."""

from __future__ import annotations

from pathlib import Path

import pytest

from safactory.cli.demo import trainer_config
from safactory.streams.evaluation.profiles import PROFILES
from safactory.trainer.config import load_config, to_toml


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_demo_trainer_config_round_trips_through_toml(name: str, tmp_path: Path) -> None:
    config = trainer_config(tmp_path / 'run "quoted"', PROFILES[name], 24, 1e-4)
    path = tmp_path / "trainer.toml"
    path.write_text(to_toml(config))
    assert load_config(path) == config
    assert config.batch_size == config.max_batch_size == 24 and config.eval_tasks
