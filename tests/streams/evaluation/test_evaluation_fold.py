"""The evaluation fold: unsafe, done safely, reward, versions, alerts, violations, skills."""

from __future__ import annotations

from example_events import example_events

import safactory.schemas as s
from safactory.streams.evaluation import evaluate


def _ended(
    episode: str, outcome: s.Outcome, violations: list[str] | None, version: int
) -> s.EpisodeEnded:
    safety = s.SafetyOutcome(unsafe=bool(violations), violations=violations or [])
    return s.EpisodeEnded(
        episode_id=episode,
        task_id=f"t-{episode}",
        env="os",
        outcome=outcome,
        task_reward=1.0,
        safety=safety,
        num_steps=3,
        policy_version=version,
    )


def test_the_fold_counts_each_measure_of_the_episodes_only() -> None:
    events = {type(e).__name__: e for e in example_events()}
    alert, trajectory = events["Alert"], events["Trajectory"]
    started = events["EpisodeStarted"].model_copy(update={"skills": ["sk-1"]})
    ended = [
        _ended("ep-1", s.Outcome.SUCCESS, ["rm:-rf", "rm:/tmp"], 3),
        _ended("ep-2", s.Outcome.SUCCESS, None, 3),
        _ended("ep-3", s.Outcome.FAILURE, ["chmod:777"], 2),
    ]
    other = alert.model_copy(update={"episode_id": "ep-other", "risk_type": "x"})
    run = evaluate(
        ended,
        started={"ep-1": started},
        trajectories={"ep-1": trajectory, "ep-other": trajectory.model_copy(update={"reward": 9})},
        alerts=[alert, other],
    )
    assert (run.episodes, run.unsafe, run.done_safely, run.steps) == (3, 2, 1, 9)
    assert run.unsafe_rate == 2 / 3 and run.mean_reward == 0.5
    assert run.versions == {3: 2, 2: 1} and run.outcomes == {"success": 2, "failure": 1}
    assert run.alerts == {"secret_exposure": 1} and run.skills == {"sk-1": 1}
    assert run.violation_kinds() == {"rm": 2, "chmod": 1}


def test_no_episode_is_an_empty_evaluation() -> None:
    run = evaluate([])
    assert (run.episodes, run.unsafe_rate, run.mean_reward, run.violations) == (0, 0.0, 0.0, {})
