"""What the streaming trainer reports as it runs (``safactory train`` prints it): the line it
starts with, one line of the latest metrics (logs, ``--no-live``), the rows of the live
table, and the line it ends with."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stream import StreamingTrainer, StreamStats


def started(trainer: StreamingTrainer) -> str:
    """What is trained, how, from where, and where the checkpoints go."""
    cfg = trainer.config
    return (
        f"training {cfg.policy_name!r} ({cfg.mode}, max_staleness={cfg.effective_staleness}, "
        f"device={cfg.device}) from {trainer.topic}; checkpoints in {cfg.checkpoint_dir}"
    )


def line(trainer: StreamingTrainer) -> str:
    """One line of the latest metrics."""
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


def rows(trainer: StreamingTrainer) -> list[tuple[str, str]]:
    """The live table: progress, reward, KL, staleness histogram, skips, throughput."""
    m, s = trainer.stats.last_update, trainer.stats
    out = [("version", str(trainer.version))]
    counts = (
        f"{trainer.state.trained_total} / {trainer.staleness.skipped_total} / {s.dead_lettered}"
    )
    out.append(("trained / skipped stale (all runs) / dead-lettered (this run)", counts))
    out.append(
        (
            "received / passed over on resume / buffered",
            f"{s.received} / {s.replayed} / {s.buffered}",
        )
    )
    if trainer.config.vllm.enabled:
        out.append(("vLLM reload errors", str(s.reload_errors)))
    if m is not None:
        out.append(("mean reward (last update)", f"{m.mean_reward:+.4f}"))
        out.append(("KL(behaviour ‖ current)", f"{m.behaviour_kl:.5f}"))
        if m.teacher_kl is not None:
            out.append(("reverse KL to teacher (est.)", f"{m.teacher_kl:.5f}"))
        out.append(("loss / clip fraction", f"{m.loss:+.4f} / {m.clip_fraction:.3f}"))
    staleness = trainer.staleness
    out.append(("staleness histogram (lag: count)", str(dict(sorted(staleness.accepted.items())))))
    out.append(("skipped by lag", str(dict(sorted(staleness.skipped.items())))))
    out.append(("tokens/s", f"{s.tokens_per_s:,.0f}"))
    ts = trainer.learner.transformer.stats
    out.append(
        (
            "re-tokenise mismatches / prompt mismatches / unrecorded steps / truncated",
            f"{ts.retokenize_mismatches} of {ts.retokenize_checked} / {ts.prompt_mismatches} / "
            f"{ts.unrecorded_steps} / {ts.truncated}",
        )
    )
    return out


def done(trainer: StreamingTrainer, stats: StreamStats) -> str:
    """The version reached and what this run announced, skipped and held out."""
    return (
        f"done: version {trainer.version}, {stats.published} announcements, "
        f"{stats.skipped_stale} skipped as stale in this run, {stats.dead_lettered} dead-lettered, "
        f"{stats.held_out} held out (evaluation tasks, never trained on)"
    )
