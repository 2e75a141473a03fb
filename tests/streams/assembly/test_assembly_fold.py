"""Trajectory assembly as a pure fold: order, duplicates, timeouts, abandonment, rewards."""

from __future__ import annotations

import random

from data_episodes import episode_events
from hypothesis import given, settings
from hypothesis import strategies as st

from safactory.infra.config import Settings
from safactory.infra.store import ChangelogStore
from safactory.schemas import EpisodeEnded, Event, Outcome, Step, Trajectory, Verdict
from safactory.streams.assembly import AssemblerConfig, RewardRule, TrajectoryAssembler
from safactory.streams.assembly.live import StateJournal, restore_fold

NOW = 5000.0


def _run(events: list[Event], config: AssemblerConfig | None = None) -> dict[str, Trajectory]:
    assembler = TrajectoryAssembler(config)
    out = []
    for event in events:
        out += assembler.apply(event, NOW)
    trajectories = [e for e in out if isinstance(e, Trajectory)]
    assert len(trajectories) == len({t.episode_id for t in trajectories}), "emitted twice"
    return {t.episode_id: t for t in trajectories}


def _comparable(t: Trajectory) -> dict:
    return t.model_dump(exclude={"produced_at"})


def _disorder(events: list[Event], rng: random.Random) -> list[Event]:
    """Shuffle across topics and steps; keep each episode's order within sf.episodes and
    within sf.verdicts (one key, one partition: what Kafka guarantees); redeliver some
    records later, including after their episode completed."""
    queues: dict[tuple[str, str], list[Event]] = {}
    slots: list[Event | tuple[str, str]] = []
    for e in events:
        if isinstance(e, Step):
            slots.append(e)
        else:
            lane = (e.TOPIC, e.episode_id)
            queues.setdefault(lane, []).append(e)
            slots.append(lane)
    rng.shuffle(slots)
    mixed = [s if isinstance(s, Event) else queues[s].pop(0) for s in slots]
    for e in rng.sample(events, k=len(events) // 3):  # redelivery: again, after the first
        first = next(i for i, x in enumerate(mixed) if x.event_id == e.event_id)
        mixed.insert(rng.randrange(first + 1, len(mixed) + 1), e)
    return mixed


ORDERED = [e for n in range(12) for e in episode_events(n, steps=1 + n % 4)]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_disordered_duplicated_stream_yields_the_ordered_trajectories(seed: int) -> None:
    expected = _run(ORDERED)
    assert len(expected) == 12
    got = _run(_disorder(ORDERED, random.Random(seed)))
    assert {k: _comparable(v) for k, v in got.items()} == {
        k: _comparable(v) for k, v in expected.items()
    }


def test_trajectory_content_reward_and_oldest_policy_version() -> None:
    out = _run(episode_events(3, steps=3))  # episode 3 is unsafe: last step blocked HIGH
    t = out["ep-3"]
    assert [s.step_index for s in t.steps] == [0, 1, 2]
    assert t.policy_version == 0 and t.max_policy_version == 2
    assert t.group_id == "g-1" and t.completed_by == "verdicts"
    assert t.reward_components == {"task": 0.0, "outcome": 0.0, "safety": -(0.7 + 1.0)}
    assert t.reward == -1.7
    assert len(t.verdict_ids) == 4 and "max(" in t.reward_rule
    safe = _run(episode_events(1, steps=2))["ep-1"]
    assert safe.reward == 1.0 and safe.reward_components["safety"] == 0.0


def test_reward_rule_is_configurable() -> None:
    rule = RewardRule(combine="sum", unsafe_penalty=0.0, outcome_bonus={Outcome.FAILURE: -1.0})
    t = _run(episode_events(3, steps=3), AssemblerConfig(reward_rule=rule))["ep-3"]
    assert t.reward == -1.7 and t.reward_components["outcome"] == -1.0
    assert "sum(" in t.reward_rule


def test_waits_for_steps_that_arrive_after_the_end() -> None:
    events = episode_events(1, steps=3)
    late_step = events.pop(3)  # step 1 arrives after the episode verdict
    assembler = TrajectoryAssembler()
    assert all(not assembler.apply(e, NOW) for e in events)
    (t,) = assembler.apply(late_step, NOW)
    assert isinstance(t, Trajectory) and len(t.steps) == 3


def test_verdict_timeout_closes_and_is_recorded() -> None:
    events = episode_events(2, steps=2, episode_verdict=False)
    assembler = TrajectoryAssembler(AssemblerConfig(verdict_timeout_s=10))
    assert all(not assembler.apply(e, NOW) for e in events)
    assert assembler.tick(NOW + 9) == []
    (t,) = assembler.tick(NOW + 10)
    assert isinstance(t, Trajectory) and t.completed_by == "timeout"
    assert assembler.stats.emitted_by_timeout == 1
    # a verdict after closing is late: counted, no second trajectory
    late = episode_events(2, steps=2)[-1]
    assert assembler.apply(late, NOW + 11) == []
    assert assembler.stats.late_after_close == 1


def test_episode_that_never_ends_is_abandoned_not_dropped() -> None:
    events = [e for e in episode_events(4, steps=3) if not isinstance(e, EpisodeEnded)][:4]
    assembler = TrajectoryAssembler(AssemblerConfig(episode_timeout_s=60))
    for e in events:
        assembler.apply(e, NOW)
    assert assembler.tick(NOW + 59) == []
    ended, trajectory = assembler.tick(NOW + 60)
    assert isinstance(ended, EpisodeEnded) and ended.outcome == Outcome.ABANDONED
    assert isinstance(trajectory, Trajectory) and trajectory.completed_by == "abandoned"
    assert trajectory.outcome == Outcome.ABANDONED and trajectory.reward < 0
    # the abandon event comes back through sf.episodes: a late duplicate, nothing new
    assert assembler.apply(ended, NOW + 61) == []
    again = TrajectoryAssembler(AssemblerConfig(episode_timeout_s=60))
    for e in events:
        again.apply(e, NOW)
    assert [x.event_id for x in again.tick(NOW + 60)] == [ended.event_id, trajectory.event_id]


def test_state_written_per_event_restores_the_fold() -> None:
    events = episode_events(5, steps=3) + episode_events(6, steps=2)
    store = ChangelogStore(Settings(), "state")  # in memory: what compaction would keep
    state = store.partition(0)
    assembler = TrajectoryAssembler(journal=StateJournal(state))
    for e in events[:-1]:  # ep-6 still waits for its episode verdict
        assembler.apply(e, NOW)
    stored = {(k, i): v for k in state.keys() for i, v in state.items(k).items()}
    assert all(len(v) < 2000 for v in stored.values())  # one event per record
    assert [i for k, i in stored if k == "ep-5"] == ["closed"]
    states, closed, unreadable = restore_fold(state, NOW + 500)
    assert (set(states), set(closed), unreadable) == ({"ep-6"}, {"ep-5"}, 0)
    fresh = TrajectoryAssembler(states=states, closed=closed)
    assert fresh.apply(events[0], NOW + 500) == []  # a late duplicate of a closed episode
    (t,) = fresh.apply(events[-1], NOW + 500)
    assert _comparable(t) == _comparable(_run(events)["ep-6"])
    assert fresh.tick(NOW + 500 + 29) == []  # restored timeouts start at the restore


def test_postponed_timeouts_wait_for_a_backlog() -> None:
    events = [e for e in episode_events(7, steps=3) if not isinstance(e, Step | Verdict)]
    assembler = TrajectoryAssembler(AssemblerConfig(verdict_timeout_s=30))
    for e in events:  # the end arrives, its steps are still unread
        assembler.apply(e, NOW)
    assembler.postpone(100)  # the caller was behind its inputs for 100 s
    assert assembler.tick(NOW + 100) == []
    assert assembler.tick(NOW + 130)[0].completed_by == "timeout"


def test_summary_verdict_on_every_step_completes_without_episode_verdict() -> None:
    events = episode_events(4, steps=2, episode_verdict=False)
    steps = [e for e in events if isinstance(e, Step)]
    summaries = [
        Verdict(
            episode_id=s.episode_id,
            source_event_id=s.event_id,
            step_index=s.step_index,
            env=s.env,
            checker="audit.summary",
            risk_type="none",
            score=0.0,
        )
        for s in steps
    ]
    assembler = TrajectoryAssembler(AssemblerConfig(verdict_timeout_s=10))
    assert all(not assembler.apply(e, NOW) for e in [*events, summaries[0]])  # one step unjudged
    (t,) = assembler.apply(summaries[1], NOW)
    assert isinstance(t, Trajectory) and t.completed_by == "verdicts"
    assert {v.event_id for v in summaries} <= set(t.verdict_ids)
    # with the rule switched off the same stream waits for the timeout
    off = TrajectoryAssembler(
        AssemblerConfig(verdict_timeout_s=10, required_step_checkers=frozenset())
    )
    assert all(not off.apply(e, NOW) for e in [*events, *summaries])
    (late,) = off.tick(NOW + 10)
    assert isinstance(late, Trajectory) and late.completed_by == "timeout"
