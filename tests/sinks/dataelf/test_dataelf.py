"""DataElf plans on a LanceDB the sink filled: validated before they run, intents answered
end to end, and a saved plan rerun to the same bytes."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from data_episodes import episode_events
from deliveries import deliveries, stored_as_the_sink
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.schemas import Step, Verdict
from safactory.sinks.dataelf.operators import PlanError, RunContext, Services
from safactory.sinks.dataelf.plan import Plan, load_plan, run_plan
from safactory.sinks.lance import LanceSink
from safactory.streams.audit import registry
from safactory.streams.audit.engine import AuditEngine
from safactory.streams.audit.rejudge import rejudge

runner = CliRunner()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    """Twelve episodes in two envs (every third unsafe), their verdicts and trajectories."""
    path = tmp_path_factory.mktemp("lance") / "db"
    events = [e for n in range(12) for e in episode_events(n, env="os" if n < 8 else "web")]
    return path, stored_as_the_sink(path, events)


def test_risk_types_per_policy_version_as_a_chart(db: tuple[Path, list], tmp_path: Path) -> None:
    path, events = db
    plan = Plan.model_validate(
        {
            "intent": "how often did each risk type fire per policy version, as a chart",
            "steps": [
                {"op": "select", "table": "verdicts", "min_severity": "high"},
                {"op": "aggregate", "by": ["policy_version", "risk_type"]},
                {"op": "plot", "x": "policy_version", "series": "risk_type", "name": "risk.png"},
            ],
        }
    )
    table, manifest = run_plan(plan, path, tmp_path / "run")
    expected = Counter(
        (e.policy_version, e.risk_type)
        for e in events
        if type(e).__name__ == "Verdict" and e.severity.rank >= 3
    )
    got = {(r["policy_version"], r["risk_type"]): r["count"] for r in table.to_pylist()}
    assert got == dict(expected) and sum(got.values()) == 4  # episodes 0, 3, 6, 9
    assert (tmp_path / "run" / "risk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(manifest) == {"risk.png", "rows"}


def test_top_safe_trajectories_of_an_env_as_chat_jsonl(
    db: tuple[Path, list], tmp_path: Path
) -> None:
    path, _ = db
    plan = Plan.model_validate(
        {
            "intent": "the 3 best-rewarded successful os trajectories as chat JSONL",
            "steps": [
                {"op": "select", "table": "trajectories", "env": "os"},
                {"op": "where", "column": "outcome", "equals": "success"},
                {"op": "top", "column": "reward", "k": 3},
                {"op": "export", "format": "chat_jsonl", "name": "best.jsonl"},
            ],
        }
    )
    table, _ = run_plan(plan, path, tmp_path / "run")
    records = [
        json.loads(line) for line in (tmp_path / "run" / "best.jsonl").read_text().splitlines()
    ]
    assert len(records) == table.num_rows == 3
    assert all(
        r["metadata"]["env"] == "os" and r["metadata"]["outcome"] == "success" for r in records
    )
    assert all(r["messages"][0]["role"] == "user" for r in records)


def test_a_saved_plan_reruns_to_the_same_bytes(db: tuple[Path, list], tmp_path: Path) -> None:
    path, _ = db
    plan = Plan.model_validate(
        {
            "steps": [
                {"op": "select", "table": "steps", "min_policy_version": 1},
                {"op": "sample", "k": 5, "seed": 7},
                {"op": "export", "format": "parquet", "name": "sample.parquet"},
                {"op": "aggregate", "by": ["env"]},
                {"op": "plot", "x": "env", "name": "envs.png"},
            ]
        }
    )
    _, first = run_plan(plan, path, tmp_path / "a")
    again = load_plan(tmp_path / "a" / "plan.json")
    _, second = run_plan(again, path, tmp_path / "b")
    assert first == second
    for name in ("sample.parquet", "envs.png", "manifest.json", "plan.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_a_plan_is_refused_before_it_runs_naming_the_step_and_field(tmp_path: Path) -> None:
    cases = [
        ({"steps": [{"op": "drop_table", "table": "steps"}]}, "steps[0].op='drop_table'"),
        ({"steps": [{"op": "select", "table": "secrets"}]}, "steps[0] (select).table"),
        (
            {"steps": [{"op": "select", "table": "steps"}, {"op": "select", "table": "steps"}]},
            "select only starts a plan",
        ),
        ({"steps": [{"op": "top", "column": "reward", "k": 3}]}, "a plan starts with select"),
        (
            {"steps": [{"op": "select", "table": "steps"}, {"op": "top", "column": "x", "k": 0}]},
            "steps[1] (top).k",
        ),
    ]
    for i, (data, message) in enumerate(cases):
        file = tmp_path / f"plan{i}.json"
        file.write_text(json.dumps(data))
        with pytest.raises(
            PlanError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")
        ):
            load_plan(file)


def test_operators_check_columns_and_inputs_when_they_run(
    db: tuple[Path, list], tmp_path: Path
) -> None:
    path, _ = db
    wrong_column = Plan.model_validate(
        {"steps": [{"op": "select", "table": "verdicts"}, {"op": "aggregate", "by": ["colour"]}]}
    )
    with pytest.raises(PlanError, match="aggregate: no column 'colour'"):
        run_plan(wrong_column, path, tmp_path / "x")
    text_mean = Plan.model_validate(  # was an Arrow "no kernel" error, not a plan error
        {
            "steps": [
                {"op": "select", "table": "verdicts"},
                {"op": "aggregate", "by": ["env"], "mean": "checker"},
            ]
        }
    )
    with pytest.raises(PlanError, match="aggregate: mean needs a number or yes/no column"):
        run_plan(text_mean, path, tmp_path / "y")
    not_trajectories = Plan.model_validate(
        {
            "steps": [
                {"op": "select", "table": "verdicts"},
                {"op": "export", "format": "chat_jsonl", "name": "v.jsonl"},
            ]
        }
    )
    with pytest.raises(PlanError, match="chat_jsonl writes trajectories"):
        not_trajectories.steps[1].apply(
            not_trajectories.steps[0].apply(None, ctx := RunContext(path, tmp_path)), ctx
        )


def test_the_cli_prints_the_plan_runs_it_and_refuses_an_intent_without_a_plan(
    db: tuple[Path, list], tmp_path: Path
) -> None:
    path, _ = db
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "intent": "unsafe episodes per env",
                "steps": [
                    {"op": "select", "table": "episodes"},
                    {"op": "where", "column": "unsafe", "equals": True},
                    {"op": "aggregate", "by": ["env"]},
                ],
            }
        )
    )
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["data", "ask", "--plan", str(plan), "--db", str(path), "--out", str(out), "--yes"]
    )
    assert result.exit_code == 0, result.output
    assert "1. select(table='episodes')" in result.output
    assert re.search(r"^os\s+3$", result.output, re.M) and re.search(
        r"^web\s+1$", result.output, re.M
    )
    assert (out / "plan.json").exists()
    both = ["data", "ask", "unsafe episodes per env", "--plan", str(plan), "--db", str(path)]
    refused = runner.invoke(app, both)
    assert refused.exit_code == 2 and "one of the two" in refused.output


def test_steps_joined_with_their_verdicts_and_deduped(
    db: tuple[Path, list], tmp_path: Path
) -> None:
    path, events = db
    plan = Plan.model_validate(
        {
            "intent": "os steps a rule judged a prompt injection, one per task",
            "steps": [
                {"op": "select", "table": "steps", "env": "os"},
                {"op": "join", "inner": True},
                {"op": "where", "column": "verdicts_risk_type", "equals": "prompt_injection"},
                {"op": "dedupe", "columns": ["task_id"]},
            ],
        }
    )
    table, _ = run_plan(plan, path, tmp_path / "run")
    flagged = {
        e.source_event_id
        for e in events
        if type(e).__name__ == "Verdict" and e.risk_type == "prompt_injection"
    }
    expected = {
        e.task_id
        for e in events
        if type(e).__name__ == "Step" and e.env == "os" and e.event_id in flagged
    }
    assert sorted(table["task_id"].to_pylist()) == sorted(expected) and len(expected) == 3
    everything = Plan.model_validate(
        {
            "steps": [
                {"op": "select", "table": "steps"},
                {"op": "join"},
                {"op": "dedupe", "columns": ["ENV"]},
            ]
        }
    )
    with pytest.raises(PlanError, match=r"dedupe: no column 'ENV'"):
        run_plan(everything, path, tmp_path / "bad")


def test_reaudit_without_a_rule_shows_what_changed(tmp_path: Path) -> None:
    """'Re-audit the os steps without the injection-marker rule and show what changed':
    the stored step verdicts are the fast tier's, so the changed steps are exactly those
    whose verdict that rule decided."""
    events = [e for n in range(6) for e in episode_events(n, env="os")]
    steps = [e for e in events if isinstance(e, Step)]
    stored = asyncio.run(_fast_summaries(steps))
    without = asyncio.run(_fast_summaries(steps, without="rule.injection_markers"))
    path = tmp_path / "db"
    LanceSink(path).write_batch(deliveries([*events, *stored]))
    plan = Plan.model_validate(
        {
            "steps": [
                {"op": "select", "table": "steps", "env": "os"},
                {"op": "reaudit", "without": ["rule.injection_markers"]},
                {"op": "where", "column": "changed", "equals": True},
            ]
        }
    )
    table, _ = run_plan(plan, path, tmp_path / "run", Services(rejudge=rejudge))
    changed = {
        a.source_event_id for a, b in zip(stored, without, strict=True) if a.decision != b.decision
    }
    assert set(table["event_id"].to_pylist()) == changed and len(changed) == 4
    decided = {str(a.decision) for a in stored if a.source_event_id in changed}
    assert set(table["stored_decision"].to_pylist()) == decided  # what that rule decided
    assert "allow" not in decided
    none = Plan.model_validate(  # no step selected: no rows, not an untyped column
        {
            "steps": [
                {"op": "select", "table": "steps", "env": "qa"},
                *plan.model_dump()["steps"][1:],
            ]
        }
    )
    assert run_plan(none, path, tmp_path / "none", Services(rejudge=rejudge))[0].num_rows == 0
    unknown = Plan.model_validate(
        {"steps": [{"op": "select", "table": "steps"}, {"op": "reaudit", "without": ["rule.nope"]}]}
    )
    with pytest.raises(PlanError, match=r"unknown checker\(s\) rule.nope"):
        run_plan(unknown, path, tmp_path / "bad", Services(rejudge=rejudge))


async def _fast_summaries(steps: list[Step], without: str = "") -> list[Verdict]:
    """The fast tier's step verdicts (less ``without``), episode by episode, as the audit
    worker stores them."""
    fast = [n for n, f in registry.available().items() if f.kind in ("rule", "heuristic")]
    engine = AuditEngine(registry.create(n for n in fast if n != without))
    out = []
    for n in range(6):
        episode = [s for s in steps if s.episode_id == f"ep-{n}"]
        out += [audit.summary for audit in await engine.audit_episode(episode, tier="step")]
    return out
