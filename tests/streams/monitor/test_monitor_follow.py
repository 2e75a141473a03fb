"""The follower on the real broker: alerts, verdicts, episodes, steps, lag and policy
versions reach the live view; reading from the end skips history, --from-beginning not;
another deployment's consumer groups are not counted."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka import TopicPartition
from topic_records import set_committed

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, create_topics
from safactory.schemas import (
    Action,
    Alert,
    EpisodeEnded,
    Evidence,
    Outcome,
    PolicyVersion,
    SafetyOutcome,
    Severity,
    Step,
    Verdict,
)
from safactory.streams.monitor import Follower, LiveView


async def _until(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 (polling a view that has no event)
            await asyncio.sleep(0.05)


def _alert(step: Step, text: str) -> Alert:
    return Alert(
        episode_id=step.episode_id,
        source_event_id=step.event_id,
        step_index=step.step_index,
        env=step.env,
        checker="harm.beyond_scope",
        risk_type="destructive_operation",
        severity=Severity.CRITICAL,
        score=1.0,
        evidence=[Evidence(text=text, field="action")],
    )


async def _commit(settings: Settings, group: str, offsets: dict[TopicPartition, int]) -> None:
    await set_committed(settings, group, offsets)


async def test_follower_folds_every_topic_and_reads_lag(
    topics: Settings, producer: EventProducer, kafka: str
) -> None:
    old = Step(episode_id="ep-old", step_index=0, env="os", task_id="t", policy_version=1)
    await producer.publish(_alert(old, "published before the monitor started"))
    view = LiveView(60)
    async with Follower(topics, view, lag_every_s=0.5):
        assert view.status == "live"
        step = Step(
            episode_id="ep-1",
            step_index=2,
            env="os",
            task_id="t",
            policy_version=4,
            action=Action(text="rm -rf /srv/data"),
        )
        sent = await producer.publish(step)
        await producer.publish(
            Verdict(**_alert(step, "x").model_dump(exclude={"event_id", "evidence"}))
        )
        await producer.publish(_alert(step, "rm -rf /srv/data"))
        await producer.publish(
            EpisodeEnded(
                episode_id="ep-1",
                task_id="t",
                env="os",
                outcome=Outcome.FAILURE,
                safety=SafetyOutcome(unsafe=True),
                num_steps=3,
            )
        )
        await producer.publish(
            PolicyVersion(
                policy_name="chores-lm", policy_version=5, uri="file:///w", sha256="0" * 64
            )
        )
        steps_tp = TopicPartition(topics.topic("steps"), sent.partition)
        group = topics.group("probe")
        await _commit(topics, group, {steps_tp: 0})  # one step behind
        other = Settings(kafka_bootstrap=kafka, topic_prefix=f"other{topics.topic_prefix}")
        await create_topics(other, [BY_NAME["steps"]])
        await _commit(other, other.group("probe"), {TopicPartition(other.topic("steps"), 0): 0})
        await _until(
            lambda: (
                view.totals["steps"] == 1
                and view.totals["verdicts"] == 1
                and view.totals["alerts"] == 1
                and view.totals["unsafe_episodes"] == 1
                and "chores-lm" in view.policies
                and group in view.lag
            )
        )
        snap = view.snapshot()
    assert [a["action"] for a in snap["alerts"]] == ["rm -rf /srv/data"]  # not the old one
    assert snap["alerts"][0]["episode_id"] == "ep-1" and snap["alerts"][0]["step_index"] == 2
    assert snap["latency"]["samples"] == 1 and snap["latency"]["p50_ms"] >= 0
    assert snap["policy_in_use"] == {"os": 4}
    assert snap["policies"]["chores-lm"]["version"] == 5
    assert snap["lag"] == {group: {"lag": 1, "topics": {"steps": 1}, "partitions": 1}}

    history = LiveView(60)
    async with Follower(topics, history, from_beginning=True):
        await _until(lambda: history.totals["alerts"] == 2)
    assert {a.action for a in history.alerts} == {
        "published before the monitor started",
        "rm -rf /srv/data",
    }
