"""DataElf's planners: the plan grammar admits every careful plan, SmolLM2 under it plans
an intent that then runs, and an OpenAI-compatible endpoint is asked for the schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from gateway_support import scripted_upstream
from test_dataelf import db  # noqa: F401  (the module's LanceDB fixture)
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra.embedding import MiniLM
from safactory.sinks.dataelf.operators import PlanError
from safactory.sinks.dataelf.plan import Plan, load_plan
from safactory.sinks.dataelf.planner import (
    EndpointPlanner,
    Prompt,
    database_values,
    load_examples,
    plan_schema,
    same_plan,
)

INTENTS = Path(__file__).parents[2] / "data" / "intents.jsonl"


def _intents() -> list[dict]:
    return [json.loads(line) for line in INTENTS.read_text().splitlines() if line.strip()]


def test_the_intent_set_is_apart_from_the_planners_examples() -> None:
    intents = _intents()
    assert len(intents) >= 40
    assert not {i["intent"] for i in intents} & {e.intent for e in load_examples()}


def test_every_careful_plan_fits_the_planner_grammar(db: tuple[Path, list]) -> None:  # noqa: F811
    values = database_values(db[0])
    assert values["env"] == ["os", "web"] and "rules" in values["checker"]
    schema = plan_schema()
    for plan in [*_intents(), *({"steps": e.steps} for e in load_examples())]:
        jsonschema.validate({"steps": plan["steps"]}, schema)
    narrowed = plan_schema(values)
    with pytest.raises(jsonschema.ValidationError):  # an env the database does not hold
        jsonschema.validate({"steps": [{"op": "select", "table": "steps", "env": "qa"}]}, narrowed)
    with pytest.raises(jsonschema.ValidationError):  # a column no table has
        bad = [{"op": "select", "table": "steps"}, {"op": "where", "column": "colour"}]
        jsonschema.validate({"steps": bad}, narrowed)
    with pytest.raises(jsonschema.ValidationError):  # select only first
        jsonschema.validate({"steps": [{"op": "top", "column": "reward", "k": 1}]}, narrowed)


def test_smollm2_plans_an_intent_and_the_plan_runs(
    db: tuple[Path, list],  # noqa: F811
    tmp_path: Path,
) -> None:
    path, _ = db
    out = tmp_path / "run"
    intent = "number of verdicts per severity"
    args = ["data", "ask", intent, "--db", str(path), "--out", str(out), "--yes"]
    result = CliRunner().invoke(app, args, env={"SF_PLANNER_URL": ""})
    assert result.exit_code == 0, result.output
    saved = load_plan(out / "plan.json")
    assert saved.intent == intent and saved.steps[0].NAME == "select"
    assert '"op": "select"' in result.output  # the plan shown as JSON before it ran
    rows = json.loads((out / "manifest.json").read_text())["rows"]
    assert int(rows) >= 1


def test_an_endpoint_is_asked_for_the_plan_schema(db: tuple[Path, list]) -> None:  # noqa: F811
    careful = _intents()[1]
    seen: list[dict] = []
    answer = {"role": "assistant", "content": json.dumps({"steps": careful["steps"]})}
    prompt = Prompt(MiniLM().embed, values=database_values(db[0]))
    with scripted_upstream([answer], seen=seen) as url:
        planner = EndpointPlanner(prompt, url, "big-model", api_key="k")
        planned = planner.planned(careful["intent"])
    assert same_plan(planned.plan, Plan.model_validate(careful))
    body = seen[0]
    assert body["model"] == "big-model" and body["temperature"] == 0
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == plan_schema(prompt.values)
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "system" and roles[-1] == "user" and "assistant" in roles
    assert body["messages"][-1]["content"] == careful["intent"]

    wrong = {"role": "assistant", "content": '{"steps": [{"op": "top", "column": "x", "k": 1}]}'}
    with scripted_upstream([wrong]) as url, pytest.raises(PlanError, match="not a valid plan"):
        EndpointPlanner(prompt, url, "m").plan("anything")
    with pytest.raises(PlanError, match=r"planner endpoint http://127\.0\.0\.1:9/v1"):
        EndpointPlanner(prompt, "http://127.0.0.1:9/v1", "m", timeout_s=2).plan("anything")
