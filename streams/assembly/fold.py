"""The assembler's fold: events in, reward-complete trajectories (and abandon events) out.

Pure Python with an explicit clock (``now``), so tests drive it without a broker. The fold
is insensitive to arrival order and duplicates: an episode is emitted once, when it has

* ended (``EpisodeEnded``) and every one of its ``num_steps`` steps arrived, and
* its episode-level verdicts are in (one from each ``required_checkers``, or any one), or
  every step has a verdict from each of ``required_step_checkers`` (the live auditor judges
  step by step and closes each step with an ``audit.summary`` verdict),

or when the verdict timeout after the end passed (``completed_by="timeout"``). Verdicts on
actions a menu offered and the agent did not take (``Verdict.choice``) neither complete a
step nor cost reward: they mark the step's ``unsafe_untaken`` choices, negatives a trainer
may use. An episode
with no end after ``episode_timeout_s`` of silence is closed: an ``EpisodeEnded`` with
outcome ``abandoned`` is emitted, then its trajectory (``completed_by="abandoned"``).
Events for an episode already closed are counted as late (they stay in their own topics).

The timeouts run on the clock the caller passes. A caller that falls behind its inputs
calls :meth:`TrajectoryAssembler.postpone` for the time it was behind, so an episode is not
closed while its remaining steps still wait unread in the backlog. Every change of state is
told to a :class:`Journal` (an event kept, an episode closed, a closed episode forgotten),
which is how a processor makes the state durable one small record at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from ...infra import metrics
from ...schemas import (
    Decision,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Outcome,
    Step,
    Trajectory,
    TrajectoryStep,
    Verdict,
    derive_id,
)
from ...schemas.completion import episode_complete
from .reward import RewardRule

PRODUCER = "trajectory-assembler"
PRODUCER_VERSION = 1


@dataclass(frozen=True)
class AssemblerConfig:
    """Knobs of the assembler (seconds are on the clock passed to ``apply``/``tick``)."""

    reward_rule: RewardRule = field(default_factory=RewardRule)
    require_verdicts: bool = True
    """Wait for episode-level verdicts after the end (False: complete at the end)."""
    required_checkers: frozenset[str] = frozenset()
    """Checkers whose episode-level verdict must arrive; empty means any one checker."""
    required_step_checkers: frozenset[str] = frozenset({"audit.summary"})
    """Checkers whose verdict on every step also completes the verdicts (empty: never)."""
    verdict_timeout_s: float = 30.0
    episode_timeout_s: float = 900.0
    closed_memory_s: float = 3600.0
    """How long a closed episode is remembered so late duplicates are recognised."""


def _count(field: str, doc: str) -> metrics.Count:
    return metrics.Count(f"sf_assembler_{field}", doc)


class AssemblerStats(metrics.Published):
    """What the folds did (in the metrics registry); nothing is dropped without a count.
    Every fold of a worker counts into the same series; trajectories sent are ``out``."""

    events = _count("events", "events folded")
    duplicates = _count("duplicates", "events folded before (redeliveries)")
    conflicting_steps = _count("conflicting_steps", "a second step at a known step index")
    late_after_close = _count("late_after_close", "events of an episode already closed")
    emitted_by_verdicts = _count("emitted_by_verdicts", "trajectories completed by verdicts")
    emitted_by_timeout = _count("emitted_by_timeout", "trajectories closed by the timeout")
    abandoned = _count("abandoned", "episodes abandoned without an end")
    abandoned_without_steps = _count("abandoned_without_steps", "abandoned with no step")
    ignored = _count("ignored", "events the fold does not use")


@dataclass
class EpisodeState:
    """Everything known so far about one open episode."""

    episode_id: str
    started: EpisodeStarted | None = None
    ended: EpisodeEnded | None = None
    steps: dict[int, Step] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)
    last_activity: float = 0.0
    ended_seen_at: float | None = None

    def add(self, event: Event, now: float) -> Literal["new", "duplicate", "conflict"]:
        """Record one event; say whether it was new."""
        result: Literal["new", "duplicate", "conflict"] = "new"
        if isinstance(event, Step):
            known = self.steps.get(event.step_index)
            if known is not None:
                result = "duplicate" if known.event_id == event.event_id else "conflict"
            else:
                self.steps[event.step_index] = event
        elif isinstance(event, EpisodeStarted):
            result = "new" if self.started is None else "duplicate"
            self.started = self.started or event
        elif isinstance(event, EpisodeEnded):
            if self.ended is not None:
                result = "duplicate"
            else:
                self.ended, self.ended_seen_at = event, now
        elif isinstance(event, Verdict):
            if event.event_id in self.verdicts:
                result = "duplicate"
            else:
                self.verdicts[event.event_id] = event
        if result == "new":
            self.last_activity = max(self.last_activity, now)
        return result

    def steps_complete(self) -> bool:
        """The end arrived and so did every step it counts (:func:`episode_complete`)."""
        return episode_complete(self.ended.num_steps if self.ended else None, len(self.steps))

    def episode_checkers(self) -> set[str]:
        """Checkers that gave an episode-level verdict."""
        return {v.checker for v in self.verdicts.values() if v.step_index is None}

    def event_ids(self) -> list[str]:
        """Ids of every event kept for this episode."""
        kept: list[Event] = [*self.steps.values(), *self.verdicts.values()]
        kept += [e for e in (self.started, self.ended) if e is not None]
        return [e.event_id for e in kept]


class Journal(Protocol):
    """Receives every change of the fold's state (to make it durable)."""

    def kept(self, event: Event) -> None:
        """``event`` was added to its open episode."""

    def closed(self, state: EpisodeState, at: float) -> None:
        """The episode closed at ``at``: its events are no longer needed."""

    def forgotten(self, episode_id: str) -> None:
        """A closed episode left the memory of closed episodes."""


class _NoJournal:
    def kept(self, event: Event) -> None:
        pass

    def closed(self, state: EpisodeState, at: float) -> None:
        pass

    def forgotten(self, episode_id: str) -> None:
        pass


class TrajectoryAssembler:
    """Folds episode events into trajectories. ``apply`` per event, ``tick`` periodically.

    ``states`` (open episodes) and ``closed`` (episode → when it closed) start from what a
    processor restored; ``journal`` hears of every change after that.
    """

    def __init__(
        self,
        config: AssemblerConfig | None = None,
        journal: Journal | None = None,
        states: dict[str, EpisodeState] | None = None,
        closed: dict[str, float] | None = None,
    ) -> None:
        self.config = config or AssemblerConfig()
        self.journal: Journal = journal or _NoJournal()
        self.states: dict[str, EpisodeState] = states if states is not None else {}
        self.closed: dict[str, float] = closed if closed is not None else {}
        self.stats = AssemblerStats()

    def apply(self, event: Event, now: float) -> list[Event]:
        """Fold one event in; return what became ready (a trajectory, or nothing)."""
        self.stats.events += 1
        if not isinstance(event, Step | EpisodeStarted | EpisodeEnded | Verdict):
            self.stats.ignored += 1
            return []
        episode = event.episode_id
        if episode in self.closed:
            self.stats.late_after_close += 1
            return []
        state = self.states.get(episode) or EpisodeState(episode, last_activity=now)
        result = state.add(event, now)
        if result == "duplicate":
            self.stats.duplicates += 1
        elif result == "conflict":
            self.stats.conflicting_steps += 1
        else:
            self.journal.kept(event)
        self.states[episode] = state
        if self._ready_by_verdicts(state):
            out = self._close(state, now, "verdicts")
            self.stats.emitted_by_verdicts += 1  # counted once it was built
            return out
        return []

    def tick(self, now: float) -> list[Event]:
        """Close episodes whose verdict or episode timeout passed; forget old closed ones."""
        out: list[Event] = []
        for state in list(self.states.values()):
            if state.ended is not None:
                assert state.ended_seen_at is not None
                if now - state.ended_seen_at >= self.config.verdict_timeout_s:
                    out += self._close(state, now, "timeout")
                    self.stats.emitted_by_timeout += 1
            elif now - state.last_activity >= self.config.episode_timeout_s:
                out += self._abandon(state, now)
        horizon = now - self.config.closed_memory_s
        for episode in [e for e, t in self.closed.items() if t < horizon]:
            del self.closed[episode]
            self.journal.forgotten(episode)
        return out

    def postpone(self, seconds: float) -> None:
        """Push every open episode's timeouts ``seconds`` later (its caller was behind)."""
        for state in self.states.values():
            state.last_activity += seconds
            if state.ended_seen_at is not None:
                state.ended_seen_at += seconds

    def _ready_by_verdicts(self, state: EpisodeState) -> bool:
        if not state.steps_complete():
            return False
        if not self.config.require_verdicts:
            return True
        checkers = state.episode_checkers()
        if self.config.required_checkers:
            if self.config.required_checkers <= checkers:
                return True
        elif checkers:
            return True
        return self._every_step_judged(state)

    def _every_step_judged(self, state: EpisodeState) -> bool:
        required = self.config.required_step_checkers
        if not required:
            return False
        judged = {(v.step_index, v.checker) for v in state.verdicts.values() if v.choice is None}
        return all((s.step_index, c) in judged for s in state.steps.values() for c in required)

    def _abandon(self, state: EpisodeState, now: float) -> list[Event]:
        self.stats.abandoned += 1
        first = state.started or next(iter(state.steps.values()), None)
        if first is None:  # only verdicts arrived: nothing to name the task by
            self.stats.abandoned_without_steps += 1
            self._forget(state, now)
            return []
        versions = [s.policy_version for s in state.steps.values()]
        state.ended = EpisodeEnded(
            event_id=derive_id(PRODUCER, PRODUCER_VERSION, "abandoned", state.episode_id),
            produced_at=now,
            episode_id=state.episode_id,
            task_id=first.task_id,
            env=first.env,
            group_id=first.group_id,
            outcome=Outcome.ABANDONED,
            num_steps=len(state.steps),
            policy_version=min(versions) if versions else None,
        )
        return [state.ended, *self._close(state, now, "abandoned")]

    def _close(
        self, state: EpisodeState, now: float, by: Literal["verdicts", "timeout", "abandoned"]
    ) -> list[Event]:
        self._forget(state, now)
        if by == "abandoned" and not state.steps:
            self.stats.abandoned_without_steps += 1
            return []
        return [self._trajectory(state, now, by)]

    def _forget(self, state: EpisodeState, now: float) -> None:
        del self.states[state.episode_id]
        self.closed[state.episode_id] = now
        self.journal.closed(state, now)

    def _trajectory(
        self, state: EpisodeState, now: float, by: Literal["verdicts", "timeout", "abandoned"]
    ) -> Trajectory:
        ended = state.ended
        assert ended is not None
        steps = [state.steps[i] for i in sorted(state.steps)]
        verdicts = sorted(state.verdicts.values(), key=lambda v: v.event_id)
        rule = self.config.reward_rule
        components = rule.components(ended, [v for v in verdicts if v.choice is None])
        versions = [s.policy_version for s in steps]
        if not versions:
            versions = [v for v in (ended.policy_version, _started_version(state)) if v is not None]
        started = state.started
        return Trajectory(
            event_id=derive_id(PRODUCER, PRODUCER_VERSION, state.episode_id),
            produced_at=now,
            episode_id=state.episode_id,
            group_id=_group_id(state),
            task_id=ended.task_id,
            env=ended.env,
            prompt=list(started.prompt) if started else [],
            steps=[_trajectory_step(s, verdicts) for s in steps],
            outcome=ended.outcome,
            safety=ended.safety,
            reward=rule.reward(components),
            reward_components=components,
            reward_rule=rule.describe(),
            verdict_ids=[v.event_id for v in verdicts],
            completed_by=by,
            policy_version=min(versions, default=0),
            max_policy_version=max(versions, default=0),
        )


def _started_version(state: EpisodeState) -> int | None:
    return state.started.policy_version if state.started else None


def _group_id(state: EpisodeState) -> str:
    for source in (state.started, state.ended, *state.steps.values()):
        if source is not None and source.group_id:
            return source.group_id
    assert state.ended is not None
    return state.ended.task_id  # no group: the episode is a group of one task


def _trajectory_step(step: Step, verdicts: list[Verdict]) -> TrajectoryStep:
    offered = len(step.choices or ())
    unsafe_untaken = {
        v.choice
        for v in verdicts
        if v.step_index == step.step_index
        and v.choice is not None
        and v.choice < offered
        and v.decision is Decision.BLOCK
    }
    return TrajectoryStep(
        step_index=step.step_index,
        messages=step.messages,
        token_ids=step.token_ids,
        logprobs=step.logprobs,
        prompt_token_ids=step.prompt_token_ids,
        policy_version=step.policy_version,
        blocked=step.blocked,
        choices=step.choices,
        unsafe_untaken=sorted(unsafe_untaken),  # type: ignore[arg-type]
    )
