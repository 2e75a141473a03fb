"""The first question on a fresh machine: planned at once by the base SmolLM2 from worked
examples while the fine-tuned planner builds in the background, the build started once and
its progress read from its log."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from safactory.infra.models import SMOLLM2, ensure_smollm2
from safactory.sinks.dataelf import background
from safactory.sinks.dataelf.corpus import CHECKERS, ENVS, RISKS
from safactory.sinks.dataelf.operators import PlanError
from safactory.sinks.dataelf.planner import PlanQuestion
from safactory.sinks.dataelf.tuning import STAMP, Recipe, digest, planner_dir

VALUES = {"env": sorted(ENVS), "risk_type": sorted(RISKS), "checker": sorted(CHECKERS)}
STEP = "step 1/3  loss 1.000  1 s  (about 0 min left)"


@pytest.fixture
def fresh_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A models folder with the base SmolLM2 and no planner, and a build that only sleeps."""
    base = ensure_smollm2(progress=False)
    models = tmp_path / "models"
    models.mkdir()
    (models / SMOLLM2).symlink_to(base)
    monkeypatch.setenv("SF_MODELS", str(models))
    fake = f"import time; print('  {STEP}', flush=True); time.sleep(60)"
    monkeypatch.setattr(background, "BUILD", [sys.executable, "-c", fake])
    yield models
    try:
        os.kill(json.loads(background._pid_file().read_text())["pid"], signal.SIGKILL)
    except (OSError, ValueError):
        pass


def test_the_first_question_is_planned_while_the_build_runs_once(fresh_models: Path) -> None:
    assert not background.built() and not background.running()
    planner, line = background.local_planner(VALUES)
    assert "building in the background (started" in line and str(background.log_file()) in line
    pid = json.loads(background._pid_file().read_text())["pid"]
    assert background.running()
    again = background.local_planner(VALUES)[1]  # a second question starts no second build
    assert "(running;" in again
    assert json.loads(background._pid_file().read_text())["pid"] == pid
    deadline = time.monotonic() + 20
    while background.progress() != STEP and time.monotonic() < deadline:
        time.sleep(0.2)
    assert background.progress() == STEP
    assert planner.examples is not None and len(planner.examples.nearest("x")) == background.SHOWN
    try:
        planned = planner.planned("number of verdicts per severity")
    except PlanQuestion as exc:  # the grammar admits a question back, one line
        assert str(exc).startswith("Which")
    except PlanError as exc:  # or tokens running out inside the grammar
        assert "not a valid plan" in str(exc)
    else:
        assert planned.plan.steps[0].NAME == "select" and planned.seconds < 60
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while background.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not background.running()  # a dead build is not taken for a running one
    background.log_file().write_text("Traceback (most recent call last):\nMemoryError\n")
    restarted = background.local_planner(VALUES)[1]  # started again, the reason said
    assert "(started; the last build stopped unfinished: MemoryError" in restarted
    os.kill(json.loads(background._pid_file().read_text())["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while background.running() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not background.running()
    background.log_file().write_text(f"  step 3/3\n{planner_dir()}\n")  # finished, now stale
    assert "unfinished" not in background.local_planner(VALUES)[1]


def test_the_examples_vectors_are_kept_and_a_finished_build_is_seen(fresh_models: Path) -> None:
    prompt = background.example_planner(VALUES).examples
    assert prompt is not None and prompt.cache is not None
    first = prompt.nearest("rate of blocked steps per env")
    kept = list(prompt.cache.glob("*.npy"))
    assert len(kept) == 1
    assert np.load(kept[0]).shape == (len(prompt.examples), 384)
    again = background.example_planner(VALUES).examples
    assert again is not None and again.nearest("rate of blocked steps per env") == first
    assert not background.built()
    planner_dir().mkdir(parents=True)
    (planner_dir() / STAMP).write_text(json.dumps({"digest": digest(Recipe())}))
    assert background.built()
    (planner_dir() / STAMP).write_text(json.dumps({"digest": "another recipe"}))
    assert not background.built()
