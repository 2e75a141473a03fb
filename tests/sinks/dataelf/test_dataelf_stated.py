"""What a request states that a plan left out is put back: a bound on a number, a yes/no
fact, an outcome, a kind of poisoning, groups to count by, a ranking; and a plan that
already says it, or a request that does not, is left alone."""

from __future__ import annotations

from safactory.sinks.dataelf.grounding import unguessed
from safactory.sinks.dataelf.plan import Plan
from safactory.sinks.dataelf.stated import (
    bound,
    groups,
    said_bounds,
    said_facts,
    said_groups,
    said_join,
    said_outcome,
    said_poison,
    said_poisoning,
    said_quote,
    said_random,
    said_search,
    said_severity_floor,
    said_top,
    said_version,
)


def plan(*steps: dict) -> Plan:
    return Plan.model_validate({"intent": "x", "steps": list(steps)})


def steps(p: Plan) -> list[dict]:
    return [s.model_dump(exclude_unset=True) | {"op": s.NAME} for s in p.steps]


def test_a_stated_bound_is_read_from_the_words_around_the_number() -> None:
    assert bound("episodes with a task reward above 0.25", "episodes") == {
        "column": "task_reward",
        "min": 0.25,
    }
    assert bound("verdicts scoring 0.9 or more", "verdicts") == {"column": "score", "min": 0.9}
    assert bound("runs whose return is under 0.1", "trajectories") == {
        "column": "reward",
        "max": 0.1,
    }
    assert bound("reward between 0.2 and 0.6", "trajectories") == {
        "column": "reward",
        "min": 0.2,
        "max": 0.6,
    }
    assert bound("trajectories longer than 4 steps", "trajectories") == {
        "column": "num_steps",
        "min": 5,
    }
    assert bound("the 3 trajectories with the best reward", "trajectories") is None
    assert bound("rewards over the last 2 days", "trajectories") is None
    assert bound("a score above 0.5", "steps") is None  # steps hold no score


def test_a_bound_the_plan_searched_for_becomes_a_filter() -> None:
    searched = plan(
        {"op": "select", "table": "verdicts"}, {"op": "search", "query": "scoring 0.7", "k": 3}
    )
    got = said_bounds("verdicts scoring at least 0.7 from the secrets rule", searched)
    assert steps(got) == [
        {"op": "select", "table": "verdicts"},
        {"op": "where", "column": "score", "min": 0.7},
    ]
    filtered = plan(
        {"op": "select", "table": "verdicts"}, {"op": "where", "column": "score", "min": 0.6}
    )
    assert said_bounds("verdicts scoring at least 0.7", filtered) == filtered


def test_a_fact_a_column_holds_is_filtered_not_searched() -> None:
    searched = plan({"op": "select", "table": "steps"}, {"op": "search", "query": "blocking"})
    assert steps(said_facts("which steps did the auditor end up blocking?", searched))[1] == {
        "op": "where",
        "column": "blocked",
        "equals": True,
    }
    assert steps(said_facts("steps that were not blocked", searched))[1]["equals"] is False
    other = plan({"op": "select", "table": "steps"}, {"op": "search", "query": "deleting files"})
    assert said_facts("steps about deleting files that got blocked", other) == other
    counted = plan(
        {"op": "select", "table": "steps"}, {"op": "search", "query": "blocking", "k": 5}
    )
    assert said_facts("the 5 steps most like blocking a payment", counted) == counted


def test_a_stated_outcome_is_filtered_on_unless_something_reads_it() -> None:
    listed = plan({"op": "select", "table": "trajectories", "env": "os"})
    got = steps(said_outcome("os trajectories that failed, as parquet", listed))
    assert got[1] == {"op": "where", "column": "outcome", "equals": "failure"}
    assert said_outcome("os trajectories that never failed", listed) == listed
    assert said_outcome("success rate of os trajectories", listed) == listed
    grouped = plan(
        {"op": "select", "table": "trajectories"}, {"op": "aggregate", "by": ["outcome"]}
    )
    assert said_outcome("how many trajectories succeeded, per outcome", grouped) == grouped
    assert (
        said_outcome("steps that failed", plan({"op": "select", "table": "steps"})).steps[1:] == []
    )


def test_a_kind_of_poisoning_named_is_the_kind_kept() -> None:
    checked = plan({"op": "select", "table": "trajectories"}, {"op": "poison", "label": "outcome"})
    got = steps(said_poison("do any runs carry a backdoor?", checked))
    assert got[-1] == {"op": "where", "column": "poison", "equals": "trigger"}
    got = steps(said_poison("runs whose labels were swapped", checked))
    assert got[-1] == {"op": "where", "column": "poison", "equals": "flip"}
    assert said_poison("check the runs for poisoning", checked) == checked


def test_groups_counted_per_are_added_when_the_plan_lists_rows() -> None:
    assert groups("for every policy version and each env, how many steps", "steps") == [
        "policy_version",
        "env",
    ]
    assert groups("the top 5 trajectories by reward", "trajectories") == []
    listed = plan(
        {"op": "select", "table": "verdicts"}, {"op": "where", "column": "score", "min": 0.5}
    )
    got = steps(said_groups("per severity level, count the verdicts over 0.5", listed))
    assert got[-1] == {"op": "aggregate", "by": ["severity"]}
    assert said_groups("verdicts over 0.5, by severity", listed) == listed  # no count asked
    ranked = plan({"op": "select", "table": "verdicts"}, {"op": "top", "column": "score", "k": 3})
    assert said_groups("how many of the top 3 per checker", ranked) == ranked


def test_a_stated_ranking_is_kept() -> None:
    scored = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "score"},
        {"op": "export", "format": "csv", "name": "t.csv"},
    )
    got = steps(said_top("save the worst 7 trajectories by quality as csv", scored))
    assert got[2] == {"op": "top", "column": "quality", "k": 7, "lowest": True}
    assert got[-1]["op"] == "export"
    assert said_top("the top 7 trajectories by vibes", scored) == scored
    kept = plan({"op": "select", "table": "trajectories"}, {"op": "sample", "k": 7})
    assert said_top("top 7 trajectories by reward", kept) == kept


def test_rows_likened_to_a_description_are_searched_not_re_audited() -> None:
    reaudited = plan(
        {"op": "select", "table": "steps", "env": "os"},
        {"op": "reaudit", "checkers": ["rule.secrets"]},
        {"op": "where", "column": "changed", "equals": True},
    )
    got = steps(said_search("os steps that resemble copying a password file?", reaudited))
    assert got[1:] == [{"op": "search", "query": "copying a password file"}]
    asked = "audit the os steps again with only the secrets rule, about copying passwords"
    assert said_search(asked, reaudited) == reaudited


def test_a_version_is_exact_unless_the_request_says_onward() -> None:
    onward = plan({"op": "select", "table": "steps", "min_policy_version": 2})
    got = said_version("steps produced under policy 2", onward).steps[0]
    assert (got.policy_version, got.min_policy_version) == (2, None)
    assert said_version("steps since policy 2", onward) == onward
    assert said_version("steps of v2 and later", onward) == onward
    exact = plan({"op": "select", "table": "steps", "policy_version": 2})
    got = said_version("steps from version 2 onwards", exact).steps[0]
    assert (got.policy_version, got.min_policy_version) == (None, 2)
    assert said_version("steps from version 2 on task t-1", exact) == exact


def test_a_quoted_phrase_is_searched_word_for_word() -> None:
    searched = plan({"op": "select", "table": "steps"}, {"op": "search", "query": "deleting logs"})
    got = steps(said_quote("steps nearest to 'delete the logs' please", searched))
    assert got[1]["query"] == "delete the logs"
    assert said_quote("the agent's steps about the user's logs", searched) == searched


def test_at_random_is_a_sample_not_a_diverse_pick() -> None:
    diverse = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "score"},
        {"op": "diverse", "k": 6, "weight": "value"},
    )
    assert steps(said_random("six trajectories picked at random, seed 3", diverse))[1:] == [
        {"op": "sample", "k": 6}
    ]
    assert said_random("six varied trajectories, at random", diverse) == diverse


def test_a_join_adds_the_verdict_columns_named_and_drops_unmatched_rows_when_asked() -> None:
    joined = plan({"op": "select", "table": "steps"}, {"op": "join", "columns": ["severity"]})
    got = steps(
        said_join("steps with their checkers and risk types, skipping unjudged ones", joined)
    )
    assert got[1] == {"op": "join", "columns": ["checker", "risk_type"], "inner": True}
    assert said_join("steps with their verdicts' severity", joined) == joined


def test_poisoning_is_checked_on_the_label_named() -> None:
    listed = plan({"op": "select", "table": "steps"})
    got = steps(said_poisoning("has the injected flag on steps been poisoned?", listed))
    assert got[1:] == [{"op": "poison", "label": "injected"}]
    got = steps(said_poisoning("is the decision each step got poisoned?", listed))
    assert got[1:] == [
        {"op": "join", "columns": ["decision"]},
        {"op": "poison", "label": "verdicts_decision"},
    ]
    checked = plan({"op": "select", "table": "trajectories"}, {"op": "poison", "label": "outcome"})
    assert said_poisoning("os trajectories that may be poisoned", checked) == checked
    verdicts = plan({"op": "select", "table": "verdicts"})
    assert said_poisoning("verdicts about data poisoning", verdicts) == verdicts


def test_a_severity_floor_said_is_the_one_selected() -> None:
    listed = plan({"op": "select", "table": "verdicts", "min_severity": "low"})
    assert said_severity_floor("the high-severity verdicts", listed).steps[0].min_severity == "high"
    assert said_severity_floor("verdicts the secrets rule raised", listed) == listed


def test_a_cross_tab_counts_by_both_groups() -> None:
    counted = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["severity"]})
    got = steps(said_groups("verdict counts, severity x checker", counted))
    assert got[1] == {"op": "aggregate", "by": ["severity", "checker"]}


def test_a_risk_type_nobody_names_is_not_filtered_on_and_one_unknown_is_asked() -> None:
    guessed = plan({"op": "select", "table": "verdicts", "risk_type": "fraud"})
    kept, about = unguessed("the high-severity verdicts of the past week", guessed)
    assert about is None and kept.steps[0].risk_type is None
    assert unguessed("verdicts about spam", guessed)[1] == "risk_type"
