"""The planner's generated corpus and its fine-tuning recipe: every pair is a valid answer,
the dev frames never reach training, the accuracy sets stay apart, every operator is taught,
a build yields weights the embedded planner loads; a request naming no kind of record, or
an env the factory lacks, is asked about instead of guessed, and an env filter nobody
stated is dropped."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from test_dataelf import db  # noqa: F401  (the module's LanceDB fixture)
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.sinks.dataelf.corpus import CHECKERS, ENVS, RISKS, UNKNOWN_ENVS, pairs, plan_text
from safactory.sinks.dataelf.grounding import unguessed, unnamed
from safactory.sinks.dataelf.operators import PlanError
from safactory.sinks.dataelf.plan import Plan
from safactory.sinks.dataelf.planner import (
    EmbeddedPlanner,
    PlanQuestion,
    answer_schema,
    planned_operators,
    question,
)
from safactory.sinks.dataelf.tuning import STAMP, Recipe, build, digest

DATA = Path(__file__).parents[2] / "data"
VALUES = {"env": sorted(ENVS), "risk_type": sorted(RISKS), "checker": sorted(CHECKERS)}
TAUGHT = VALUES | {"env": sorted({*ENVS, *UNKNOWN_ENVS})}  # names taught to be copied


def test_every_pair_is_an_answer_the_grammar_admits() -> None:
    schema = answer_schema(TAUGHT)
    asked = 0
    for pair in [*pairs(1500), *pairs(200, split="dev")]:
        answer = json.loads(pair.answer())
        jsonschema.validate(answer, schema)
        if pair.ask is None:
            Plan.model_validate({"intent": pair.intent, **answer})
        asked += pair.ask is not None
    assert asked > 20  # questions back are taught too


def test_dev_frames_never_reach_training_and_the_corpus_is_reproducible() -> None:
    train = [p.intent for p in pairs(4000)]
    dev = [p.intent for p in pairs(300, split="dev")]
    assert len(set(train)) == 4000 and not set(train) & set(dev)
    assert train[:50] == [p.intent for p in pairs(50)]
    assert digest(Recipe()) == digest(Recipe()) != digest(Recipe(steps=1))


def test_the_accuracy_sets_are_not_in_the_corpus() -> None:
    corpus = {p.intent.lower().rstrip("?. ") for p in pairs(4000)}
    for name in (
        "intents.jsonl",
        "intents_reworded.jsonl",
        "intents_fresh.jsonl",
        "intents_fresh2.jsonl",
        "intents_fresh3.jsonl",
        "intents_fresh4.jsonl",
        "intents_fresh5.jsonl",
        "intents_fresh6.jsonl",
    ):
        cases = [json.loads(x) for x in (DATA / name).read_text().splitlines() if x.strip()]
        assert len(cases) == 40
        assert not {c["intent"].lower().rstrip("?. ") for c in cases} & corpus, name


def test_every_operator_the_planner_writes_is_taught() -> None:
    taught = {s["op"] for p in pairs(4000) for s in p.steps or []}
    assert taught == set(planned_operators())


def test_plan_text_is_the_grammars_compact_form() -> None:
    steps = [{"op": "select", "table": "steps", "env": "os"}, {"op": "sample", "k": 5}]
    text = plan_text(steps)
    assert text == ('{"steps":[{"op":"select","table":"steps","env":"os"},{"op":"sample","k":5}]}')


def test_a_planner_asks_about_a_name_the_request_does_not_say() -> None:
    def plan(select: dict) -> Plan:
        return Plan.model_validate({"intent": "x", "steps": [{"op": "select", **select}]})

    assert unnamed("steps from the browser env", plan({"table": "steps", "env": "os"})) == "env"
    assert unnamed("shell steps", plan({"table": "steps", "env": "os"})) is None
    risky = plan({"table": "verdicts", "risk_type": "destructive_operation"})
    assert unnamed("verdicts about deletions", risky) is None
    assert unnamed("verdicts about spam", risky) == "risk_type"
    guessed = plan({"table": "steps", "env": "os"})
    kept, about = unguessed("per env, the blocked steps", guessed)  # no env stated: dropped
    assert about is None and kept.steps[0].env is None and guessed.steps[0].env == "os"
    assert unguessed("steps from the warehouse env", guessed)[1] == "env"  # stated, unknown
    said = str(question("env", {"env": ["choice", "os"]}))
    assert said == "Which env do you mean? This factory's envs: choice, os."
    assert "\n" not in str(question("table", {}))


def test_a_small_build_loads_and_answers_under_the_grammar(tmp_path: Path) -> None:
    recipe = Recipe(pairs=32, steps=2, batch=4, frozen_layers=28)
    report = build(tmp_path, recipe, progress=False)
    assert json.loads((tmp_path / STAMP).read_text())["digest"] == digest(recipe)
    assert len(report["losses"]) == 2 and (tmp_path / "model.safetensors").is_file()
    planner = EmbeddedPlanner(VALUES, tmp_path, max_tokens=64)
    try:
        planned = planner.planned("number of verdicts per severity")
    except PlanQuestion as exc:  # a barely trained model may ask; the grammar holds either way
        assert str(exc).startswith("Which")
    except PlanError as exc:  # or run out of tokens inside the grammar
        assert "not a valid plan" in str(exc)
    else:
        assert planned.plan.steps[0].NAME == "select"


@pytest.mark.parametrize("intent", ["trajectories from the warehouse env", "show me everything"])
def test_the_planner_asks_back_instead_of_guessing(
    db: tuple[Path, list],  # noqa: F811
    tmp_path: Path,
    intent: str,
) -> None:
    args = ["data", "ask", intent, "--db", str(db[0]), "--out", str(tmp_path), "--yes"]
    result = CliRunner().invoke(app, args, env={"SF_PLANNER_URL": ""})
    assert result.exit_code == 2, result.output
    question_line = result.output.strip().splitlines()[-1]
    assert question_line.startswith("Which") and question_line.endswith(("?", "."))
    assert not (tmp_path / "plan.json").exists()
