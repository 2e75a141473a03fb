"""The rounds of a before / after evaluation: held-out tasks and seeds repeat, training
rounds run the other tasks on new seeds; each round's result and the run's summary."""

from __future__ import annotations

from example_events import example_events

from safactory.agents.registry import env_class
from safactory.streams.evaluation.observer import Tally
from safactory.streams.evaluation.rounds import HELD_OUT, RoundPlan, RoundResult, run_summary


def test_held_out_rounds_repeat_their_tasks_and_training_rounds_move_on() -> None:
    plan = RoundPlan("demo-x", "choice", episodes=6, training=2, seed=5, injection=True)
    assert plan.kinds == ["before", "injection", "train", "train", "after"]
    assert [plan.training_round(i) for i in range(5)] == [0, 0, 1, 2, 2]
    suite = env_class("choice").suite()
    rounds = [plan.tasks(i, suite) for i in range(5)]
    assert all(len(r) == 6 for r in rounds)

    def shown(tasks: list) -> list:
        return [(t.spec, t.seed, t.task_id.split("-", 3)[-1]) for t in tasks]

    before, injection, train1, train2, after = rounds
    assert shown(before) == shown(injection) == shown(after)
    assert all(HELD_OUT in t.task_id for t in before + after)
    assert not any(HELD_OUT in t.task_id for t in train1 + train2)
    assert [t.seed for t in before] == list(range(5, 11))
    assert [t.seed for t in train1] == list(range(1005, 1011))
    assert {t.seed for t in train2}.isdisjoint(t.seed for t in train1)


def test_a_round_result_and_the_run_summary_read_the_tally() -> None:
    events = {type(e).__name__: e for e in example_events()}
    ended, alert = events["EpisodeEnded"], events["Alert"]
    safe = ended.model_copy(update={"episode_id": "ep-2", "task_id": "t-2", "safety": None})
    tally = Tally(
        ended={"ep-1": ended, "ep-2": safe},
        alerts={alert.event_id: alert},
        trajectories={"ep-1": events["Trajectory"]},
        skills={"sk-1": events["Skill"]},
    )
    before = RoundResult.of(0, "before", tally.evaluate({"t-1", "t-2"}))
    assert (before.episodes, before.unsafe, before.done_safely) == (2, 1, 1)
    assert before.unsafe_rate == 0.5 and before.mean_reward == 0.5
    assert before.alerts == {"secret_exposure": 1} and before.versions == {3: 2}
    after = RoundResult.of(1, "after", tally.evaluate({"t-2"}))
    assert tally.confirmed_unsafe({"t-2"}, {"ep-1", "ep-2"}) == {"ep-1"}  # by its alert
    assert tally.confirmed_unsafe({"t-1"}, {"ep-2"}) == set()
    summary = run_summary([before, after], tally)
    assert summary["before"] == {"unsafe_rate": 0.5, "mean_reward": 0.5}
    assert summary["after"] == {"unsafe_rate": 0.0, "mean_reward": 0.0}
    assert summary["injection"] is None and list(summary["skills"]) == ["sk-1"]
    assert summary["unsafe_episodes"] == ["ep-1"] and summary["alerted_episodes"] == ["ep-1"]
    assert summary["rounds"][0]["kind"] == "before" and summary["versions_run"] == [3]
