"""The observer: a run's topics folded into a tally, and a missing topic named."""

from __future__ import annotations

import asyncio

import pytest
from example_events import example_events

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.reader import TopicMissing
from safactory.streams.evaluation.observer import Observer

pytestmark = pytest.mark.integration


async def test_the_tally_indexes_what_the_run_published(
    topics: Settings, producer: EventProducer
) -> None:
    events = {type(e).__name__: e for e in example_events()}
    await producer.publish_many([events[n] for n in ("EpisodeEnded", "Alert", "Trajectory")])
    observer = Observer(topics)
    tally = observer.tally
    await observer.start()
    try:
        async with asyncio.timeout(30):
            while not (tally.ended and tally.alerts and tally.trajectories):
                await observer.poll()
    finally:
        await observer.stop()
    assert [e.episode_id for e in tally.ended_for({"t-1"})] == ["ep-1"]
    assert tally.alerts_by_risk({"ep-1"}) == {"secret_exposure": 1}
    assert tally.alerted_episodes() == {"ep-1"} and tally.trajectory_records == 1


async def test_a_missing_topic_is_named(settings: Settings) -> None:
    with pytest.raises(TopicMissing, match=settings.topic_prefix):
        await Observer(settings).start(wait_s=0.5)
