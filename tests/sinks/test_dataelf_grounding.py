"""A plan grounded in its request: the answer grammar admits only numbers the request
states (or a parameter's default), a stated number the plan left out goes to the one
count-like parameter that takes it, a stated env is applied and an unstated one dropped."""

from __future__ import annotations

import jsonschema
import pytest

from safactory.sinks.dataelf.grounding import (
    filled,
    grounded,
    loose_numbers,
    polarity,
    polarized,
    possible,
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
