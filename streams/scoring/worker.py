"""The scoring worker: trajectories in, data-value ``Score`` events out to ``sf.scores``.

Each polled batch of trajectories is scored together (novelty is measured within the
batch), the scores are published and acknowledged, and only then are the input offsets
committed (at-least-once; score ids are deterministic per episode).
"""

from __future__ import annotations

import asyncio

from ...infra import aio, metrics
from ...infra.config import Settings
from ...infra.consumer import Delivery, EventConsumer
from ...infra.producer import EventProducer
from ...schemas import Trajectory
from .embedding import TextEmbedder
from .perplexity import LMScorer
from .value import Weights, record_from_trajectory, score_event, score_records


class ScorerStats(metrics.Tally):
    """What the scoring worker did (in the metrics registry)."""

    scored = metrics.records_out()
    batches = metrics.Count("sf_scorer_batches", "batches of trajectories scored")


async def run_scorer(
    settings: Settings,
    embedder: TextEmbedder,
    lm: LMScorer | None = None,
    *,
    weights: Weights | None = None,
    group_id: str = "safactory-scorer",
    idle_timeout_s: float | None = None,
    max_records: int = 200,
) -> ScorerStats:
    """Score trajectories until SIGINT / SIGTERM (or idle for ``idle_timeout_s``);
    ``group_id`` is scoped by the topic prefix (``Settings.group``)."""
    metrics.serve(settings, "score")
    stats = ScorerStats()
    scores_topic = settings.topic("scores")
    chosen = weights or Weights()
    async with EventProducer(settings) as producer:

        async def handle(batch: list[Delivery]) -> None:
            unique = {d.event.event_id: d.event for d in batch if isinstance(d.event, Trajectory)}
            records = [record_from_trajectory(t) for t in unique.values()]
            if not records:
                return
            scored, _ = await asyncio.to_thread(score_records, records, embedder, lm, chosen)
            await producer.publish_many([score_event(s) for s in scored])
            stats.count("scored", len(scored), topic=scores_topic)
            stats.batches += 1

        consumer = EventConsumer(
            ["trajectories"],
            settings.group(group_id),
            batch_handler=handle,
            settings=settings,
            max_records=max_records,
        )
        with aio.stop_on_signals(consumer.request_stop):
            async with consumer:
                await consumer.run(idle_timeout=idle_timeout_s)
    return stats
