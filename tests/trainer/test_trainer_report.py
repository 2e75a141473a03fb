"""What the streaming trainer reports: its first line, a metrics line before and after an
update, the live table's rows, and its last line."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from safactory.trainer import report
from safactory.trainer.config import TrainerConfig


def _trainer(update: object | None) -> SimpleNamespace:
    """A stand-in with the attributes the report reads."""
    stats = SimpleNamespace(
        last_update=update,
        tokens_per_s=1234.4,
        dead_lettered=1,
        received=10,
        replayed=2,
        buffered=3,
        reload_errors=0,
        published=4,
        skipped_stale=5,
        held_out=6,
    )
    staleness = SimpleNamespace(skipped_total=5, accepted={1: 2, 0: 8}, skipped={3: 5})
    transformer = SimpleNamespace(
        stats=SimpleNamespace(
            retokenize_mismatches=0,
            retokenize_checked=9,
            prompt_mismatches=0,
            unrecorded_steps=1,
            truncated=0,
        )
    )
    return SimpleNamespace(
        config=TrainerConfig(policy_name="p", checkpoint_dir=Path("/c")),
        topic="sf.trajectories",
        version=3,
        stats=stats,
        staleness=staleness,
        state=SimpleNamespace(trained_total=40),
        learner=SimpleNamespace(transformer=transformer),
    )


def test_the_lines_and_rows_say_what_the_trainer_did() -> None:
    idle = _trainer(None)
    assert report.line(idle) == "v3: no update yet; 5 skipped as stale in total"
    assert report.started(idle).startswith("training 'p' (")
    assert report.started(idle).endswith("from sf.trajectories; checkpoints in /c")
    update = SimpleNamespace(
        mean_reward=0.5,
        behaviour_kl=0.01,
        trajectories=8,
        teacher_kl=None,
        loss=-0.2,
        clip_fraction=0.1,
    )
    busy = _trainer(update)
    assert report.line(busy) == (
        "v3 reward=+0.500 kl=0.0100 trajectories=8 skipped_total=5 staleness={0: 8, 1: 2} "
        "tokens/s=1,234"
    )
    rows = dict(report.rows(busy))
    assert rows["trained / skipped stale (all runs) / dead-lettered (this run)"] == "40 / 5 / 1"
    assert rows["mean reward (last update)"] == "+0.5000"
    assert "vLLM reload errors" not in rows and "reverse KL to teacher (est.)" not in rows
    assert report.done(busy, busy.stats) == (
        "done: version 3, 4 announcements, 5 skipped as stale in this run, 1 dead-lettered, "
        "6 held out (evaluation tasks, never trained on)"
    )
