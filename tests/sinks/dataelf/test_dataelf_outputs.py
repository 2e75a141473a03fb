"""The outputs a request asks for are the ones it gets, under the names it gives: a chart's
file and title, an export's file and format, and a chart that draws what its aggregate made."""

from __future__ import annotations

from safactory.sinks.dataelf.outputs import said_outputs
from safactory.sinks.dataelf.plan import Plan


def plan(*steps: dict) -> Plan:
    return Plan.model_validate({"intent": "x", "steps": list(steps)})


def steps(p: Plan) -> list[dict]:
    return [s.model_dump(exclude_unset=True) | {"op": s.NAME} for s in p.steps]


COUNTED = (
    {"op": "select", "table": "episodes"},
    {"op": "aggregate", "by": ["env", "outcome"]},
)


def test_a_png_named_is_the_chart_and_no_file_of_rows_is_written() -> None:
    guessed = plan(
        *COUNTED,
        {"op": "export", "format": "csv", "name": "episodes.csv"},
        {"op": "plot", "x": "env", "name": "chart.png"},
    )
    drawn = said_outputs("graph episodes per env and outcome, save it to runs_by_env.png", guessed)
    assert [s["op"] for s in steps(drawn)] == ["select", "aggregate", "plot"]
    assert steps(drawn)[2]["name"] == "runs_by_env.png"
    # a file format said as well: the export stays
    both = said_outputs("episodes per env and outcome as csv, and a chart in e.png", guessed)
    assert [s["op"] for s in steps(both)] == ["select", "aggregate", "export", "plot"]


def test_an_export_takes_the_file_name_and_format_given() -> None:
    exported = plan(*COUNTED, {"op": "export", "format": "parquet", "name": "episodes.parquet"})
    named = said_outputs("episodes per env and outcome into counts_v2.csv", exported)
    assert steps(named)[2] == {"op": "export", "format": "csv", "name": "counts_v2.csv"}


def test_a_chart_draws_its_aggregate_split_and_titled_as_said() -> None:
    guessed = plan(*COUNTED, {"op": "plot", "x": "env", "y": "mean_num_steps", "name": "c.png"})
    drawn = said_outputs('bar chart of episodes per env split by outcome, titled "Runs"', guessed)
    assert steps(drawn)[2] == {
        "op": "plot",
        "x": "env",
        "series": "outcome",
        "name": "c.png",
        "title": "Runs",
    }
    averaged = plan(
        {"op": "select", "table": "episodes"},
        {"op": "aggregate", "by": ["env"], "mean": "task_reward"},
        {"op": "plot", "x": "env", "y": "mean_task_reward", "name": "c.png"},
    )
    assert said_outputs("chart the mean task reward per env", averaged) == averaged
