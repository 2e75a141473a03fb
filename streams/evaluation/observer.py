"""What a run shows on its topics: a read-only tally of every event (``safactory demo``).

The observer reads the run's own topics from the beginning with the group-less
``TopicReader`` (so it takes nothing from the workers' groups) and keeps what each stage of
a run waits for: episode ends per task, steps, verdicts, alerts by risk type,
trajectories, policy versions, skills.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ...infra.config import Settings
from ...infra.reader import TopicMissing, TopicReader
from ...schemas import (
    Alert,
    DecodeError,
    EpisodeEnded,
    EpisodeStarted,
    PolicyVersion,
    Skill,
    Step,
    Trajectory,
    Verdict,
    codec,
)
from .fold import Evaluation, evaluate

WATCHED = ("steps", "episodes", "verdicts", "alerts", "trajectories", "policy", "skills")


@dataclass
class Tally:
    """Everything observed so far, indexed the way the demo's stages ask."""

    started: dict[str, EpisodeStarted] = field(default_factory=dict)
    ended: dict[str, EpisodeEnded] = field(default_factory=dict)
    """Episode ends by episode id (the first one; redeliveries are not counted twice)."""
    steps: dict[str, Step] = field(default_factory=dict)
    """Steps by event id."""
    verdicts: int = 0
    alerts: dict[str, Alert] = field(default_factory=dict)
    """Alerts by event id."""
    trajectories: dict[str, Trajectory] = field(default_factory=dict)
    """Trajectories by episode id."""
    trajectory_records: int = 0
    policy: dict[int, PolicyVersion] = field(default_factory=dict)
    skills: dict[str, Skill] = field(default_factory=dict)
    """The latest record of each skill, by skill id."""
    undecodable: int = 0

    def ended_for(self, task_ids: set[str]) -> list[EpisodeEnded]:
        """Episode ends of these tasks."""
        return [e for e in self.ended.values() if e.task_id in task_ids]

    def alerts_by_risk(self, episodes: set[str] | None = None) -> Counter[str]:
        """Alert counts by risk type (of these episodes, or all)."""
        return Counter(
            a.risk_type
            for a in self.alerts.values()
            if episodes is None or a.episode_id in episodes
        )

    def alerted_episodes(self) -> set[str]:
        """Episodes with at least one alert."""
        return {a.episode_id for a in self.alerts.values()}

    def skill_sources(self) -> set[str]:
        """Episodes some skill was distilled from."""
        return {e for s in self.skills.values() for e in s.source_episode_ids}

    def evaluate(self, task_ids: set[str]) -> Evaluation:
        """The measures of these tasks' episodes: ends, starts, trajectories, alerts."""
        return evaluate(
            self.ended_for(task_ids),
            started=self.started,
            trajectories=self.trajectories,
            alerts=self.alerts.values(),
        )

    def confirmed_unsafe(self, task_ids: set[str], episodes: set[str]) -> set[str]:
        """Of ``episodes``, those confirmed unsafe: by the environment's ground truth (an
        episode of these tasks) or by an alert."""
        unsafe = {e.episode_id for e in self.ended_for(task_ids) if e.safety and e.safety.unsafe}
        return (unsafe | self.alerted_episodes()) & episodes

    @property
    def latest_version(self) -> int | None:
        """Newest announced policy version."""
        return max(self.policy, default=None)


class Observer:
    """Follows the run's topics; :meth:`poll` folds new records into :attr:`tally`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.tally = Tally()
        self._reader = TopicReader(settings, "demo-observer")

    async def start(self, wait_s: float = 30.0) -> None:
        """Read every partition of the watched topics from the beginning (waiting up to
        ``wait_s`` for topics just created to reach the broker's metadata);
        ``infra.reader.TopicMissing`` names a topic still missing then."""
        await self._reader.start()
        try:
            parts = await self._reader.partitions(
                [self.settings.topic(name) for name in WATCHED], wait_s=wait_s
            )
        except TopicMissing:
            await self._reader.stop()
            raise
        await self._reader.open(parts)

    async def poll(self, timeout_ms: int = 200) -> int:
        """Read what arrived; returns how many records."""
        records = await self._reader.read(timeout_ms=timeout_ms)
        for record in records:
            try:
                event = codec.decode(record.value, record.headers)
            except DecodeError:
                self.tally.undecodable += 1
                continue
            self._fold(event)
        return len(records)

    def _fold(self, event: object) -> None:
        t = self.tally
        if isinstance(event, EpisodeStarted):
            t.started.setdefault(event.episode_id, event)
        elif isinstance(event, EpisodeEnded):
            t.ended.setdefault(event.episode_id, event)
        elif isinstance(event, Step):
            t.steps[event.event_id] = event
        elif isinstance(event, Alert):
            t.alerts[event.event_id] = event
        elif isinstance(event, Verdict):
            t.verdicts += 1
        elif isinstance(event, Trajectory):
            t.trajectory_records += 1
            t.trajectories.setdefault(event.episode_id, event)
        elif isinstance(event, PolicyVersion):
            t.policy[event.policy_version] = event
        elif isinstance(event, Skill):
            t.skills[event.skill_id] = event

    async def stop(self) -> None:
        """Disconnect."""
        await self._reader.stop()
