"""The skills worker: failed and unsafe trajectories in, deduplicated skills to ``sf.skills``.

It reads ``sf.trajectories`` and ``sf.verdicts`` together, keeps each episode's verdicts
until its trajectory has been handled, and distils a trajectory once every verdict it names
has arrived (or ``verdict_wait_s`` passed). At start it reads the compacted ``sf.skills``
topic so deduplication continues across restarts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ...infra import aio, metrics
from ...infra.config import Settings
from ...infra.consumer import Delivery, EventConsumer
from ...infra.producer import EventProducer
from ...schemas import Skill, Trajectory, Verdict
from .library import SkillLibrary, distil_lessons


class SkillsStats(metrics.Tally):
    """What the skills worker did (in the metrics registry)."""

    trajectories = metrics.Count("sf_skills_trajectories", "trajectories distilled")
    published = metrics.records_out()
    distilled_without_all_verdicts = metrics.Count(
        "sf_skills_without_all_verdicts", "trajectories distilled before all their verdicts came"
    )
    known_at_start = metrics.Level("sf_skills_known_at_start", "skills read back at start")


@dataclass
class _Join:
    verdicts: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    waiting: dict[str, tuple[Trajectory, float]] = field(default_factory=dict)


async def load_known_skills(settings: Settings, library: SkillLibrary) -> int:
    """Read ``sf.skills`` from the beginning into ``library``; returns the count."""
    seen: list[Skill] = []

    async def keep(d: Delivery) -> None:
        if isinstance(d.event, Skill):
            seen.append(d.event)

    reader = EventConsumer(
        ["skills"], f"skills-reader-{time.time_ns()}", handler=keep, settings=settings
    )
    async with reader:
        await reader.run(idle_timeout=2.0)
    latest = {s.skill_id: s for s in seen}
    library.add(latest.values())
    return len(latest)


async def run_skills(
    settings: Settings,
    library: SkillLibrary,
    *,
    group_id: str = "safactory-skills",
    verdict_wait_s: float = 30.0,
    idle_timeout_s: float | None = None,
) -> SkillsStats:
    """Distil and publish skills until SIGINT / SIGTERM (or idle for ``idle_timeout_s``);
    ``group_id`` is scoped by the topic prefix (``Settings.group``)."""
    metrics.serve(settings, "skills")
    stats = SkillsStats()
    stats.known_at_start = await load_known_skills(settings, library)
    skills_topic = settings.topic("skills")
    join = _Join()
    async with EventProducer(settings) as producer:

        async def distil(t: Trajectory, complete: bool) -> None:
            verdicts = list(join.verdicts.pop(t.episode_id, {}).values())
            skills = await asyncio.to_thread(library.add, distil_lessons(t, verdicts))
            await producer.publish_many(skills)
            stats.trajectories += 1
            stats.count("published", len(skills), topic=skills_topic)
            stats.distilled_without_all_verdicts += not complete

        async def handle(batch: list[Delivery]) -> None:
            for d in batch:
                if isinstance(d.event, Verdict):
                    join.verdicts.setdefault(d.event.episode_id, {})[d.event.event_id] = d.event
                elif isinstance(d.event, Trajectory):
                    join.waiting.setdefault(d.event.episode_id, (d.event, time.monotonic()))
            now = time.monotonic()
            for episode, (t, since) in list(join.waiting.items()):
                have = join.verdicts.get(episode, {})
                complete = all(v in have for v in t.verdict_ids)
                if complete or now - since >= verdict_wait_s:
                    del join.waiting[episode]
                    await distil(t, complete)

        consumer = EventConsumer(
            ["trajectories", "verdicts"],
            settings.group(group_id),
            batch_handler=handle,
            settings=settings,
        )
        with aio.stop_on_signals(consumer.request_stop):
            async with consumer:
                await consumer.run(idle_timeout=idle_timeout_s)
    return stats
