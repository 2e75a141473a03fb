"""The scoring and skills workers on the real broker: sf.scores and sf.skills get events."""

from __future__ import annotations

import pytest
from data_episodes import episode_events

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.embedding import MiniLM
from safactory.infra.producer import EventProducer
from safactory.schemas import Score, Skill, Trajectory, Verdict, codec
from safactory.streams.assembly import TrajectoryAssembler
from safactory.streams.scoring.worker import run_scorer
from safactory.streams.skills.library import SkillLibrary
from safactory.streams.skills.worker import run_skills

pytestmark = pytest.mark.integration


async def _read(settings: Settings, topic: str) -> list[Delivery]:
    got: list[Delivery] = []

    async def keep(d: Delivery) -> None:
        got.append(d)

    consumer = EventConsumer([topic], f"read-{topic}", handler=keep, settings=settings)
    async with consumer:
        await consumer.run(idle_timeout=2.0)
    return got


async def test_scores_and_skills_are_published(topics: Settings, producer: EventProducer) -> None:
    events = [e for n in range(6) for e in episode_events(n, steps=3)]
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 1.0) if isinstance(t, Trajectory)]
    verdicts = [e for e in events if isinstance(e, Verdict)]
    await producer.publish_many(trajectories + trajectories[:2])  # with redelivered copies
    await producer.publish_many(verdicts)
    minilm = MiniLM()
    score_stats = await run_scorer(topics, minilm, idle_timeout_s=3.0)
    skills_worker = await run_skills(topics, SkillLibrary(minilm), idle_timeout_s=3.0)
    scores = [d.event for d in await _read(topics, "scores")]
    assert all(isinstance(s, Score) for s in scores)
    assert {s.episode_id for s in scores} == {t.episode_id for t in trajectories}
    assert score_stats.out >= 6
    by_episode = {s.episode_id: s for s in scores}
    assert by_episode["ep-0"].scores["safety"] < by_episode["ep-1"].scores["safety"]
    skills = [d.event for d in await _read(topics, "skills")]
    assert all(isinstance(s, Skill) for s in skills)
    latest = {s.skill_id: s for s in skills}
    # a lesson for each confirmed unsafe episode's request (neither quotes the unsafe act)
    injection = [s for s in latest.values() if s.risk_types == ["prompt_injection"]]
    assert sorted(e for s in injection for e in s.source_episode_ids) == ["ep-0", "ep-3"]
    assert skills_worker.stats.distilled_without_all_verdicts == 0
    again = await run_skills(topics, SkillLibrary(minilm), group_id="second", idle_timeout_s=3.0)
    assert again.stats.known_at_start == len(latest)
    assert again.published == 0  # everything it re-reads merges into known skills


async def test_a_trajectory_that_makes_scoring_raise_is_dead_lettered(
    topics: Settings, producer: EventProducer
) -> None:
    """Poison pill: the batch fails, is scored again record by record, and only the record
    that fails alone is dead-lettered; the others are scored."""
    from poison import POISON, Poisoned, assert_poison_pill_dead_lettered

    from safactory.infra.processor import Runtime
    from safactory.streams.scoring.worker import scorer

    class Raising(MiniLM):
        def embed(self, texts):  # type: ignore[no-untyped-def]
            if any(POISON in t for t in texts):
                raise Poisoned(POISON)
            return super().embed(texts)

    events = [e for n in range(5) for e in episode_events(n, steps=2)]
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 1.0) if isinstance(t, Trajectory)]
    poisoned = trajectories[2].model_copy(
        update={"prompt": [trajectories[2].prompt[0].model_copy(update={"content": POISON})]}
    )
    runtime = Runtime(topics, scorer(Raising()))

    async def publish() -> None:
        await producer.publish_many([*trajectories[:2], poisoned, *trajectories[3:]])

    dead = await assert_poison_pill_dead_lettered(
        topics, runtime, publish, lambda: runtime.stats().out >= len(trajectories) - 1
    )
    assert codec.decode(dead.value, dead.headers).episode_id == poisoned.episode_id
    scored = {d.event.episode_id for d in await _read(topics, "scores")}
    assert scored == {t.episode_id for t in trajectories} - {poisoned.episode_id}
