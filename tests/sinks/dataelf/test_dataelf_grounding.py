"""A plan grounded in its request: the answer grammar admits only numbers the request
states (or a parameter's default), a stated number the plan left out goes to the one
count-like parameter that takes it, a stated env is applied and an unstated one dropped."""

from __future__ import annotations

import jsonschema
import pytest

from safactory.agents import env_names
from safactory.sinks.dataelf.corpus import pairs
from safactory.sinks.dataelf.grounding import (
    asked_changed,
    asked_grouping,
    asked_histogram,
    asked_latest,
    asked_outputs,
    asked_ranking,
    asked_rate,
    filled,
    ground,
    grounded,
    held_columns,
    loose_numbers,
    polarity,
    polarized,
    possible,
    said_lm,
    said_means,
    said_severity,
    said_values,
    scored_first,
    stated_env,
    stated_numbers,
    unguessed,
)
from safactory.sinks.dataelf.plan import Plan
from safactory.sinks.dataelf.planner import answer_schema

VALUES = {"env": ["choice", "os", "tools"]}


def plan(*steps: dict) -> Plan:
    return Plan.model_validate({"intent": "x", "steps": list(steps)})


def test_stated_numbers_read_digits_words_time_and_percent() -> None:
    assert stated_numbers("the ten best of the last week") == {10.0, 7.0}
    assert stated_numbers("steps of the last 48 hours above 50%") == {48.0, 2.0, 50.0, 0.5}
    assert stated_numbers("a dozen steps from 3 months ago") == {12.0, 3.0, 90.0, 30.0}
    assert loose_numbers("the last 24 hours, 10 of them, over 50 percent") == [10.0]


def test_the_grammar_admits_only_stated_counts_and_defaults() -> None:
    schema = answer_schema(VALUES)
    search = {"steps": [{"op": "select", "table": "steps"}, {"op": "search", "query": "q"}]}
    said = grounded(schema, "the 10 steps closest to q")
    jsonschema.validate(
        search | {"steps": [search["steps"][0], {"op": "search", "query": "q", "k": 10}]}, said
    )
    jsonschema.validate(search, said)  # left out: the default applies
    for k in (3, 20):  # 20 is search's default k
        answer = {"steps": [search["steps"][0], {"op": "search", "query": "q", "k": k}]}
        jsonschema.validate(answer, schema)
        if k == 3:
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(answer, said)
        else:
            jsonschema.validate(answer, said)
    version = {"steps": [{"op": "select", "table": "steps", "policy_version": 3}]}
    jsonschema.validate(version, grounded(schema, "steps of version 3"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(version, grounded(schema, "steps of the past 2 days"))
    top = {
        "steps": [
            {"op": "select", "table": "trajectories"},
            {"op": "top", "column": "reward", "k": 5},
        ]
    }
    jsonschema.validate(
        top, grounded(schema, "the best trajectories")
    )  # a required count stays free


def test_a_stated_number_left_out_goes_to_the_one_parameter_that_takes_it() -> None:
    closest = plan({"op": "select", "table": "steps"}, {"op": "search", "query": "q"})
    assert filled("the 10 steps closest to q", closest).steps[1].k == 10
    sampled = plan({"op": "select", "table": "steps"}, {"op": "sample", "k": 20})
    assert filled("20 random steps, seed 7", sampled).steps[1].seed == 7
    assert filled("20 random steps from the last 24 hours", sampled).steps[1].seed == 0
    both = plan(
        {"op": "select", "table": "steps"},
        {"op": "search", "query": "q"},
        {"op": "sample", "k": 5},
    )
    assert filled("5 of the steps closest to q, 9", both) == both  # two places: left alone


def test_a_stated_env_is_applied_and_an_unstated_one_dropped() -> None:
    search = plan({"op": "select", "table": "steps"}, {"op": "search", "query": "q"})
    applied, about = unguessed("choice env steps that resemble q", search)
    assert about is None and applied.steps[0].env == "choice"
    grouped = plan({"op": "select", "table": "steps"}, {"op": "aggregate", "by": ["env"]})
    assert unguessed("steps per env, the os env too", grouped)[0].steps[0].env is None
    guessed = plan({"op": "select", "table": "steps", "env": "os"})
    assert unguessed("the blocked steps", guessed)[0].steps[0].env is None


def test_names_the_request_says_are_the_only_ones_the_grammar_admits() -> None:
    schema = answer_schema({"checker": ["harm.beyond_scope", "rule.secrets"]} | VALUES)
    reaudit = {
        "steps": [
            {"op": "select", "table": "steps"},
            {"op": "reaudit", "without": ["rule.secrets"]},
        ]
    }
    jsonschema.validate(reaudit, grounded(schema, "re-audit the steps without a rule"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            reaudit, grounded(schema, "re-audit without the destructive-command rule")
        )


def test_an_env_the_factory_lacks_is_asked_about_whatever_the_plan_holds() -> None:
    plain = plan({"op": "select", "table": "trajectories"})
    assert unguessed("trajectories from the warehouse env", plain)[1] == "env"
    assert unguessed("trajectories from the shell env", plain)[0].steps[0].env == "os"


def test_a_yes_no_filter_is_turned_the_way_the_request_says_it() -> None:
    assert polarity("blocked steps as csv", "blocked") is True
    assert polarity("steps that were not blocked", "blocked") is False
    assert polarity("unblocked steps", "blocked") is False
    assert polarity("non-injected steps", "injected") is False
    assert polarity("steps, blocked or not blocked", "blocked") is None
    assert polarity("the steps", "blocked") is None
    wrong = plan(
        {"op": "select", "table": "steps"}, {"op": "where", "column": "blocked", "equals": False}
    )
    assert polarized("blocked steps of version 1", wrong).steps[1].equals is True
    assert polarized("steps not blocked", wrong) == wrong


def test_a_risk_type_named_for_verdicts_is_filtered_on() -> None:
    plain = plan({"op": "select", "table": "verdicts"})
    assert unguessed("verdicts about fraud", plain)[0].steps[0].risk_type == "fraud"
    per = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["risk_type"]})
    assert unguessed("fraud and deletions per risk type", per)[0].steps[0].risk_type is None


def test_a_filter_on_a_value_its_column_never_holds_is_left_out() -> None:
    made_up = plan(
        {"op": "select", "table": "verdicts"},
        {"op": "where", "column": "decision", "equals": "destroy"},
        {"op": "where", "column": "decision", "equals": "block"},
    )
    kept = possible(made_up).steps
    assert [getattr(s, "equals", None) for s in kept] == [None, "block"]


def test_an_output_nobody_asked_for_is_not_written() -> None:
    listed = plan(
        {"op": "select", "table": "episodes"},
        {"op": "top", "column": "task_reward", "k": 8},
        {"op": "export", "format": "chat_jsonl", "name": "episodes.jsonl"},
    )
    assert [s.NAME for s in asked_outputs("highest task reward: 8 episodes", listed).steps] == [
        "select",
        "top",
    ]
    assert len(asked_outputs("the 8 best episodes as a spreadsheet", listed).steps) == 3
    drawn = plan(
        {"op": "select", "table": "steps"},
        {"op": "aggregate", "by": ["env"]},
        {"op": "plot", "x": "env", "name": "chart.png"},
    )
    assert len(asked_outputs("steps per env", drawn).steps) == 2
    assert len(asked_outputs("steps per env, drawn as bars", drawn).steps) == 3


def test_a_closed_set_filter_the_request_never_speaks_of_is_dropped() -> None:
    guessed = plan(
        {"op": "select", "table": "steps"},
        {"op": "where", "column": "outcome", "equals": "success"},
        {"op": "aggregate", "by": ["task_id"]},
    )
    assert len(said_values("how many steps per task id?", guessed).steps) == 2
    assert len(said_values("how many steps that went well... successful ones", guessed).steps) == 3
    assert len(said_values("unsafe steps per task id", guessed).steps) == 3  # polarity: not here


def test_an_env_is_named_in_the_ways_users_name_it() -> None:
    assert stated_env("the 10 coding-env steps") == "coding"
    assert stated_env("steps from the Android phone env") == "Android phone"
    assert stated_env("episodes with env=tools, thanks") == "tools"
    assert stated_env("the email scores") == "email"
    assert stated_env("episodes in tools where task reward < 0.5") == "tools"
    assert stated_env("per env: the unsafe rate among episodes") is None
    assert stated_env("trajectories per outcome and env, plotted") is None
    assert stated_env("steps where the agent sent an email to the client") is None
    wrong = plan({"op": "select", "table": "steps", "env": "os"})
    grounded_plan, about = unguessed("choice env steps", wrong)
    assert (grounded_plan.steps[0].env, about) == ("choice", None)
    assert unguessed("the 10 coding-env steps", wrong)[1] == "env"  # no such env: asked


def test_yes_no_written_as_a_value() -> None:
    assert polarity("steps with blocked=false per task", "blocked") is False
    assert polarity("steps with blocked: true", "blocked") is True


def test_the_rules_leave_the_corpus_careful_plans_as_they_are() -> None:
    """The corpus is the planner's language: grounding must not undo what it teaches
    (pairs naming an env the factory lacks are questions)."""
    known = set(env_names())
    changed = []
    for p in pairs(1500, split="train"):
        if p.ask:
            continue
        careful = Plan.model_validate({"intent": p.intent, "steps": p.steps})
        got, about = ground(p.intent, careful)
        env = p.steps[0].get("env")
        asked = "env" if env and env not in known else None
        if got.model_dump(exclude_unset=True) != careful.model_dump(exclude_unset=True) or (
            about is not None and about != asked
        ):
            changed.append(p.intent)
    assert len(changed) <= 3, changed


def test_an_output_asked_for_is_written() -> None:
    counted = plan({"op": "select", "table": "steps"}, {"op": "aggregate", "by": ["env"]})
    drawn = asked_outputs("how many steps per env; visualise it", counted)
    assert drawn.steps[-1].NAME == "plot" and drawn.steps[-1].x == "env"
    saved = asked_outputs("steps per env as a spreadsheet", counted)
    assert (saved.steps[-1].NAME, saved.steps[-1].format) == ("export", "csv")


def test_an_average_is_of_the_column_the_request_says() -> None:
    guessed = plan(
        {"op": "select", "table": "steps"},
        {"op": "aggregate", "by": ["env"], "mean": "num_steps"},
    )
    assert said_means("how often are steps injected, per env", guessed).steps[1].mean == "injected"
    assert said_means("how many steps per env", guessed).steps[1].mean is None
    long = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "aggregate", "by": ["env"], "mean": "num_steps"},
    )
    assert said_means("average length of trajectories per env", long).steps[1].mean == "num_steps"


def test_rows_listed_are_not_ranked_unless_the_request_ranks_them() -> None:
    guessed = plan(
        {"op": "select", "table": "episodes"}, {"op": "top", "column": "produced_at", "k": 5}
    )
    assert [s.NAME for s in asked_ranking("list the episode rows", guessed).steps] == ["select"]
    for ranked in ("the newest episodes", "the 5 episodes", "episodes, most recent first"):
        assert asked_ranking(ranked, guessed) == guessed


def test_a_risk_type_said_by_its_name_is_a_filter_not_a_search() -> None:
    searched = plan(
        {"op": "select", "table": "verdicts"}, {"op": "search", "query": "data poisoning"}
    )
    got, about = unguessed("list the audit verdicts about data poisoning", searched)
    assert about is None
    assert got.model_dump(exclude_unset=True)["steps"] == [
        {"op": "select", "table": "verdicts", "risk_type": "data_poisoning"}
    ]
    counted = plan(
        {"op": "select", "table": "verdicts"},
        {"op": "search", "query": "data poisoning", "k": 7},
    )
    kept, _ = unguessed("the 7 verdicts nearest data poisoning", counted)
    assert [s.NAME for s in kept.steps] == ["select", "search"]


def test_value_is_scored_before_it_is_used() -> None:
    unscored = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "diverse", "k": 12, "weight": "value"},
    )
    got, _ = ground("12 diverse trajectories weighted by value with the language model", unscored)
    assert [(s.NAME, getattr(s, "lm", None)) for s in got.steps] == [
        ("select", None),
        ("score", True),
        ("diverse", None),
    ]
    scored = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "score"},
        {"op": "top", "column": "value", "k": 3},
    )
    assert scored_first(scored) == scored


def test_how_high_asks_a_magnitude_not_a_severity() -> None:
    floored = plan(
        {"op": "select", "table": "verdicts", "min_severity": "low"},
        {"op": "aggregate", "by": ["decision"], "mean": "score"},
    )
    assert (
        said_severity("how high is the score on average per decision", floored)
        .steps[0]
        .min_severity
        is None
    )
    assert (
        said_severity("high-severity verdicts per decision", floored).steps[0].min_severity == "low"
    )


def test_how_often_is_a_rate_and_per_bin_a_histogram_unless_denied() -> None:
    counted = plan(
        {"op": "select", "table": "steps"},
        {"op": "where", "column": "blocked", "equals": True},
        {"op": "aggregate", "by": ["policy_version"]},
    )
    rate = asked_rate("per policy, how many steps in a hundred were blocked", counted)
    assert rate.model_dump(exclude_unset=True)["steps"][1:] == [
        {"op": "aggregate", "by": ["policy_version"], "mean": "blocked"}
    ]
    assert asked_rate("the number, not the rate, of blocked steps per policy", counted) == counted
    averaged = plan(
        {"op": "select", "table": "episodes"},
        {"op": "aggregate", "by": ["env"], "mean": "task_reward"},
    )
    spread = asked_histogram("count episode rewards per bin", averaged)
    assert [(s.NAME, getattr(s, "column", None)) for s in spread.steps] == [
        ("select", None),
        ("histogram", "task_reward"),
    ]
    assert asked_histogram("the mean reward, not the distribution, per env", averaged) == averaged


def test_rows_asked_for_are_not_counted_in_groups() -> None:
    counted = plan(
        {"op": "select", "table": "verdicts", "min_severity": "medium"},
        {"op": "aggregate", "by": ["decision"]},
    )
    listed = asked_grouping("What medium-and-up verdicts do we have?", counted)
    assert [s.NAME for s in listed.steps] == ["select"]
    for grouped in ("medium-and-up verdicts per decision", "which decision has the most verdicts"):
        assert asked_grouping(grouped, counted) == counted
    saved = plan(
        {"op": "select", "table": "verdicts"},
        {"op": "aggregate", "by": ["decision"]},
        {"op": "export", "format": "csv", "name": "verdicts.csv"},
    )
    assert [s.NAME for s in asked_grouping("medium verdicts to a .csv file", saved).steps] == [
        "select",
        "export",
    ]


def test_a_reaudit_keeps_the_changed_steps_when_asked_and_all_when_not() -> None:
    judged = plan({"op": "select", "table": "steps"}, {"op": "reaudit"})
    changed = asked_changed("re-audit steps, changed decisions only", judged)
    assert [(s.NAME, getattr(s, "column", None)) for s in changed.steps] == [
        ("select", None),
        ("reaudit", None),
        ("where", "changed"),
    ]
    assert asked_changed("re-audit the steps", changed) == judged


def test_the_language_model_scores_when_the_request_says_so() -> None:
    scored = plan({"op": "select", "table": "trajectories"}, {"op": "score"})
    assert said_lm("data value of every rollout with the language model", scored).steps[1].lm
    lm = plan({"op": "select", "table": "trajectories"}, {"op": "score", "lm": True})
    assert said_lm("score the rollouts for training value", lm).steps[1].lm is False


def test_the_n_most_recent_rows_are_the_newest_n() -> None:
    today = plan({"op": "select", "table": "episodes", "within_days": 1})
    newest = asked_latest("the 100 most recent episodes today", today)
    assert newest.model_dump(exclude_unset=True)["steps"][1] == {
        "op": "top",
        "column": "produced_at",
        "k": 100,
    }
    assert asked_latest("episodes of the last 3 days", today) == today


def test_a_filter_on_a_column_the_rows_lack_is_left_out() -> None:
    made_up = plan(
        {"op": "select", "table": "scores", "within_days": 10},
        {"op": "where", "column": "injected", "equals": True},
    )
    assert [s.NAME for s in held_columns(made_up).steps] == ["select"]
    injected = plan(
        {"op": "select", "table": "steps"}, {"op": "where", "column": "injected", "equals": True}
    )
    assert held_columns(injected) == injected
    reaudited = plan(
        {"op": "select", "table": "steps"},
        {"op": "reaudit"},
        {"op": "where", "column": "changed", "equals": True},
    )
    assert held_columns(reaudited) == reaudited
