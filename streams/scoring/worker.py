"""``safactory worker score``: trajectories in, data-value ``Score`` events out to
``sf.scores``. Each polled batch is scored together (novelty is measured within the batch);
score ids are deterministic per episode, so a batch read again after a crash re-emits the
same ids."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ...infra.config import Settings
from ...infra.consumer import Delivery
from ...infra.embedding import TextEmbedder
from ...infra.processor import Context, Processor, ProcessorStats, Runtime
from ...schemas import Trajectory
from .value import Weights, record_from_trajectory, score_event, score_records

if TYPE_CHECKING:  # torch is imported only when a language model is given
    from .perplexity import LMScorer


def scorer(
    embedder: TextEmbedder,
    lm: LMScorer | None = None,
    *,
    weights: Weights | None = None,
    group_id: str = "safactory-scorer",
    max_records: int = 200,
) -> Processor:
    """The scoring processor (a trajectory read twice in a batch is scored once)."""
    chosen = weights or Weights()

    async def score(records: list[Delivery], ctx: Context) -> None:
        unique = {d.event.event_id: d.event for d in records if isinstance(d.event, Trajectory)}
        rows = [record_from_trajectory(t) for t in unique.values()]
        if rows:
            scored, _ = await asyncio.to_thread(score_records, rows, embedder, lm, chosen)
            for s in scored:
                ctx.emit(score_event(s))

    return Processor(
        "score",
        inputs=("trajectories",),
        outputs=("scores",),
        handle_batch=score,
        group=group_id,
        max_records=max_records,
    )


async def run_scorer(
    settings: Settings,
    embedder: TextEmbedder,
    lm: LMScorer | None = None,
    *,
    weights: Weights | None = None,
    group_id: str = "safactory-scorer",
    idle_timeout_s: float | None = None,
    max_records: int = 200,
) -> ProcessorStats:
    """Score trajectories until SIGINT / SIGTERM (or idle for ``idle_timeout_s``);
    ``group_id`` is scoped by the topic prefix (``Settings.group``)."""
    runtime = Runtime(
        settings,
        scorer(embedder, lm, weights=weights, group_id=group_id, max_records=max_records),
    )
    await runtime.serve(idle_timeout=idle_timeout_s)
    return runtime.stats()
