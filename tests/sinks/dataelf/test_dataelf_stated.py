"""What a request states that a plan left out is put back: a bound on a number, a yes/no
fact, an outcome, a kind of poisoning, groups to count by, a ranking; and a plan that
already says it, or a request that does not, is left alone."""

from __future__ import annotations

from safactory.sinks.dataelf.grounding import unguessed
from safactory.sinks.dataelf.plan import Plan
from safactory.sinks.dataelf.stated import (
    bound,
    groups,
    said_aggregate,
    said_bounds,
    said_checker,
    said_columns,
    said_decision,
    said_distinct,
    said_diverse,
    said_each_value,
    said_fact_rows,
    said_facts,
    said_grouped_values,
    said_groups,
    said_histogram,
    said_histogram_column,
    said_join,
    said_joined_groups,
    said_likeness,
    said_off,
    said_other_table,
    said_outcome,
    said_poison,
    said_poisoning,
    said_query,
    said_quote,
    said_random,
    said_ranked_column,
    said_rate,
    said_rerun,
    said_sample,
    said_search,
    said_search_column,
    said_severity_floor,
    said_top,
    said_units,
    said_version,
    said_window,
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


def test_a_list_of_groups_after_by_is_every_group() -> None:
    assert groups("split the verdicts by checker and decision, then count", "verdicts") == [
        "checker",
        "decision",
    ]
    assert groups("tally per env, checker and severity", "verdicts") == [
        "env",
        "checker",
        "severity",
    ]
    # a filter after a comma is no group
    assert groups("tally per env, severity >= medium", "verdicts") == ["env"]
    counted = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["checker"]})
    widened = said_groups("break them down by checker and severity", counted)
    assert steps(widened)[1]["by"] == ["checker", "severity"]


def test_a_stated_sample_is_drawn_with_its_seed() -> None:
    scored = plan(
        {"op": "select", "table": "trajectories", "env": "qa"},
        {"op": "score"},
        {"op": "top", "column": "value", "k": 3},
    )
    drawn = said_sample("take a random 30 of the qa runs (seed 11), score them, best 3", scored)
    assert steps(drawn)[1] == {"op": "sample", "k": 30, "seed": 11}
    # a sample the plan draws keeps its size and takes the stated seed
    sampled = plan({"op": "select", "table": "steps"}, {"op": "sample", "k": 5})
    assert steps(said_sample("5 steps at random, seed 2", sampled))[1]["seed"] == 2
    # no sample said: nothing drawn; a size some step already uses is left alone
    assert said_sample("the best 3 runs by value", scored) == scored
    assert said_sample("best 3 of a sample of 3", scored) == scored


def test_the_text_column_named_is_the_one_searched() -> None:
    searched = plan({"op": "select", "table": "skills"}, {"op": "search", "query": "backups"})
    by_title = said_search_column("skills whose names are about backups", searched)
    assert steps(by_title)[1]["column"] == "title"
    denied = "skills about backups, matching the title not the body"
    assert steps(said_search_column(denied, searched))[1]["column"] == "title"
    assert said_search_column("skills about backups", searched) == searched
    steps_searched = plan({"op": "select", "table": "steps"}, {"op": "search", "query": "rm"})
    assert said_search_column("step text about rm", steps_searched) == steps_searched


def test_a_histogram_is_of_the_measure_named() -> None:
    drawn = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "histogram", "column": "reward", "bins": 4},
    )
    assert steps(said_histogram_column("how is complexity spread? 4 bins", drawn))[1] == {
        "op": "histogram",
        "column": "complexity",
        "bins": 4,
    }
    # two measures named, or none: left as planned
    assert said_histogram_column("reward and complexity in 4 bins", drawn) == drawn
    assert said_histogram_column("a 4-bin histogram of the runs", drawn) == drawn


def test_checkers_turned_off_are_left_out_not_run_alone() -> None:
    only = plan({"op": "select", "table": "steps"}, {"op": "reaudit", "checkers": ["rule.pii"]})
    off = said_off("judge the steps again with rule.pii switched off", only)
    assert steps(off)[1] == {"op": "reaudit", "checkers": None, "without": ["rule.pii"]}
    assert steps(said_off("re-audit, leaving out rule.pii", only))[1]["without"] == ["rule.pii"]
    assert said_off("re-audit with only rule.pii", only) == only


def test_rows_qualified_by_a_fact_keep_only_those() -> None:
    joined = plan({"op": "select", "table": "steps"}, {"op": "join"})
    kept = said_fact_rows("list every injected step alongside its verdicts", joined)
    assert steps(kept)[1] == {"op": "where", "column": "injected", "equals": True}
    unblocked = said_fact_rows("steps that were not blocked, with verdicts", joined)
    assert steps(unblocked)[1] == {"op": "where", "column": "blocked", "equals": False}
    episodes = plan({"op": "select", "table": "episodes"})
    assert steps(said_fact_rows("the unsafe episodes", episodes))[1]["equals"] is True
    rate = plan(
        {"op": "select", "table": "steps"}, {"op": "aggregate", "by": ["env"], "mean": "blocked"}
    )
    assert said_fact_rows("the share of blocked steps per env", rate) == rate
    assert said_fact_rows("steps with their verdicts", joined) == joined


def test_a_likeness_is_searched_for() -> None:
    ranked = plan(
        {"op": "select", "table": "steps"},
        {"op": "top", "column": "step_index", "k": 4},
    )
    liked = said_likeness("the 4 steps nearest to 'delete the backups'", ranked)
    assert steps(liked)[1:] == [{"op": "search", "query": "delete the backups", "k": 4}]
    assert said_likeness("the 4 latest steps", ranked) == ranked
    # "similar ones" likens to nothing named: no search
    poisoned = plan({"op": "select", "table": "trajectories"}, {"op": "poison", "label": "outcome"})
    assert said_likeness("runs whose label disagrees with similar ones", poisoned) == poisoned


def test_an_aggregate_groups_by_held_columns_and_averages_the_measure_named() -> None:
    guessed = plan(
        {"op": "select", "table": "scores"},
        {"op": "aggregate", "by": ["checker"], "mean": "score"},
    )
    fixed = said_aggregate("mean composite for every scorer", guessed)
    assert steps(fixed)[1] == {"op": "aggregate", "by": ["scorer"], "mean": "composite"}
    held = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["checker"]})
    assert said_aggregate("how many verdicts per checker", held) == held


def test_a_risk_type_spoken_of_as_groups_is_no_filter_and_no_question() -> None:
    guessed = plan(
        {"op": "select", "table": "verdicts", "risk_type": "goal_hijack"},
        {"op": "aggregate", "by": ["risk_type"]},
    )
    grounded, about = unguessed("which risk types got flagged this week, counted", guessed)
    assert about is None
    assert steps(grounded)[0] == {"op": "select", "table": "verdicts"}


def test_a_decision_named_is_the_one_kept() -> None:
    counted = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["env"]})
    warned = said_decision("how many warnings did each env raise", counted)
    assert steps(warned)[1] == {"op": "where", "column": "decision", "equals": "warn"}
    assert said_decision("how many verdicts per env", counted) == counted
    assert said_decision("verdicts that were not blocked, per env", counted) == counted
    decided = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["decision"]})
    assert said_decision("count the blocks and warnings per decision", decided) == decided


def test_a_bound_the_wrong_way_round_is_turned_and_a_scored_measure_is_bounded() -> None:
    wrong = plan(
        {"op": "select", "table": "episodes"},
        {"op": "where", "column": "task_reward", "min": 0.3},
    )
    turned = said_bounds("episodes whose task reward is below 0.3", wrong)
    assert steps(turned)[1] == {"op": "where", "column": "task_reward", "max": 0.3}
    scored = plan({"op": "select", "table": "trajectories"})
    kept = said_bounds("trajectories with a quality of at least 0.7", scored)
    assert steps(kept)[1:] == [
        {"op": "score"},
        {"op": "where", "column": "quality", "min": 0.7},
    ]


def test_counts_per_a_joined_column_are_of_the_joined_name() -> None:
    joined = plan({"op": "select", "table": "steps"}, {"op": "join", "columns": ["severity"]})
    counted = said_joined_groups("attach verdict severities to steps; tally by severity", joined)
    assert steps(counted)[2] == {"op": "aggregate", "by": ["verdicts_severity"]}
    assert said_joined_groups("attach verdict severities to steps", joined) == joined


def test_a_checker_named_to_run_again_is_a_reaudit_counted_by_its_new_decision() -> None:
    sampled = plan({"op": "select", "table": "steps"}, {"op": "sample", "k": 9})
    rerun = said_rerun(
        "rerun rule.secrets over 9 sampled steps; how many per new decision?", sampled
    )
    assert steps(rerun)[2:] == [
        {"op": "reaudit", "checkers": ["rule.secrets"]},
        {"op": "aggregate", "by": ["reaudit_decision"]},
    ]
    assert said_rerun("9 sampled steps, what did rule.secrets say", sampled) == sampled


def test_a_diverse_pick_is_weighted_by_the_measure_preferred() -> None:
    picked = plan(
        {"op": "select", "table": "trajectories"}, {"op": "score"}, {"op": "diverse", "k": 6}
    )
    weighted = said_diverse("6 varied runs, favouring high quality", picked)
    assert steps(weighted)[2] == {"op": "diverse", "k": 6, "weight": "quality"}
    assert said_diverse("6 varied runs", picked) == picked


def test_a_window_in_epoch_seconds_is_since_and_until() -> None:
    guessed = plan({"op": "select", "table": "verdicts", "within_days": 1700.0})
    window = said_window("verdicts between epoch 1700000000 and 1700086400", guessed)
    assert steps(window)[0] == {
        "op": "select",
        "table": "verdicts",
        "since": 1700000000.0,
        "until": 1700086400.0,
    }
    days = plan({"op": "select", "table": "verdicts", "within_days": 3.0})
    assert said_window("verdicts of the last 3 days", days) == days


def test_a_count_of_days_is_no_ranking() -> None:
    ranked = plan(
        {"op": "select", "table": "steps", "within_days": 4.0},
        {"op": "top", "column": "produced_at", "k": 4},
    )
    assert steps(said_units("the newest steps of the past 4 days", ranked)) == steps(ranked)[:1]
    assert said_units("the 4 newest steps of the past 4 days", ranked) == ranked


def test_a_checker_named_by_its_registered_name_is_kept() -> None:
    bounded = plan(
        {"op": "select", "table": "verdicts"}, {"op": "where", "column": "score", "min": 0.4}
    )
    kept = said_checker("rule.secrets verdicts scoring 0.4 or more", bounded)
    assert steps(kept)[2] == {"op": "where", "column": "checker", "equals": "rule.secrets"}
    grouped = plan({"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["checker"]})
    assert said_checker("rule.secrets against rule.pii, per checker", grouped) == grouped


def test_several_values_named_of_a_grouped_column_are_all_counted() -> None:
    one = plan(
        {"op": "select", "table": "trajectories"},
        {"op": "where", "column": "outcome", "equals": "success"},
        {"op": "aggregate", "by": ["outcome"]},
    )
    both = said_each_value("since v2, how many runs failed and how many succeeded?", one)
    assert [s["op"] for s in steps(both)] == ["select", "aggregate"]
    assert said_each_value("since v2, how many runs succeeded, by outcome?", one) == one


def test_a_search_is_for_words_the_request_says() -> None:
    garbled = plan({"op": "select", "table": "skills"}, {"op": "search", "query": "reaudit a key"})
    fixed = said_query("skills about rotating a leaked key? only 2", garbled)
    assert steps(fixed)[1]["query"] == "rotating a leaked key"
    said = plan({"op": "select", "table": "skills"}, {"op": "search", "query": "leaked key"})
    assert said_query("skills about rotating a leaked key", said) == said


def test_distinct_combinations_are_a_dedupe_on_the_columns_named() -> None:
    picked = plan({"op": "select", "table": "verdicts"}, {"op": "diverse", "k": 2})
    distinct = said_distinct("the unique env and decision combinations among verdicts", picked)
    assert steps(distinct)[1] == {"op": "dedupe", "columns": ["env", "decision"]}
    assert said_distinct("2 verdicts far apart in meaning", picked) == picked


def test_a_measure_binned_is_a_histogram() -> None:
    picked = plan(
        {"op": "select", "table": "trajectories"}, {"op": "score"}, {"op": "diverse", "k": 8}
    )
    binned = said_histogram("score the runs and put their quality into 8 bins", picked)
    assert steps(binned)[2] == {"op": "histogram", "column": "quality", "bins": 8}
    assert said_histogram("score the runs and pick 8 varied ones", picked) == picked


def test_a_rate_per_group_is_the_mean_of_the_fact() -> None:
    listed = plan({"op": "select", "table": "steps"})
    rate = said_rate("what fraction of steps got blocked, per env?", listed)
    assert steps(rate)[1] == {"op": "aggregate", "by": ["env"], "mean": "blocked"}
    assert said_rate("what fraction of steps got blocked?", listed) == listed


def test_another_table_attached_is_joined_on_the_episode() -> None:
    averaged = plan(
        {"op": "select", "table": "episodes"},
        {"op": "aggregate", "by": ["env"], "mean": "task_reward"},
    )
    joined = said_other_table("give each episode its trajectory's num_steps, matched", averaged)
    assert steps(joined)[1:] == [
        {
            "op": "join",
            "table": "trajectories",
            "left_on": "episode_id",
            "right_on": "episode_id",
            "columns": ["num_steps"],
        }
    ]
    assert said_other_table("average task reward per env", averaged) == averaged


def test_a_grouped_column_is_not_held_to_a_value_nobody_names() -> None:
    guessed = plan(
        {"op": "select", "table": "verdicts"},
        {"op": "where", "column": "decision", "equals": "allow"},
        {"op": "aggregate", "by": ["env"]},
    )
    assert len(said_grouped_values("verdicts by env and decision", guessed).steps) == 2
    assert said_grouped_values("allowed verdicts by env and decision", guessed) == guessed


def test_the_columns_listed_to_show_are_the_ones_selected() -> None:
    guessed = plan(
        {"op": "select", "table": "steps", "policy_version": 2},
        {"op": "where", "column": "blocked", "equals": True},
    )
    shown = said_columns("only show step_index, blocked and text of version 2 steps", guessed)
    assert steps(shown) == [  # a column listed to show is not a filter
        {
            "op": "select",
            "table": "steps",
            "policy_version": 2,
            "columns": ["step_index", "blocked", "text"],
        },
    ]
    assert said_columns("only injected steps, env qa", guessed) == guessed
    warned = plan(
        {"op": "select", "table": "verdicts"},
        {"op": "where", "column": "decision", "equals": "warn"},
    )
    kept = said_columns("show only checker and decision of the warn verdicts", warned)
    assert steps(kept)[1] == {"op": "where", "column": "decision", "equals": "warn"}


def test_a_ranking_is_by_the_number_column_named() -> None:
    guessed = plan(
        {"op": "select", "table": "verdicts", "min_severity": "high"},
        {"op": "top", "column": "produced_at", "k": 3},
    )
    ranked = said_ranked_column("the 3 verdicts with the highest severity rank", guessed)
    assert steps(ranked) == [
        {"op": "select", "table": "verdicts"},
        {"op": "top", "column": "severity_rank", "k": 3},
    ]
    assert said_ranked_column("the 3 newest high-severity verdicts", guessed) == guessed
