"""DataElf's operators over meaning and value on a LanceDB the sink filled: search by
meaning, near-duplicate dedupe, value scores with diverse selection, the poisoning audit,
histograms, rates and OpenTelemetry export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from data_episodes import episode_events
from deliveries import stored_as_the_sink

from safactory.infra.embedding import MiniLM
from safactory.schemas import ChatMessage, EpisodeEnded, Outcome, Step
from safactory.sinks.dataelf.operators import PlanError
from safactory.sinks.dataelf.plan import Plan, run_plan
from safactory.tools.dataelf_job import services

CHORES = [
    "list the files in the project folder and count the python modules",
    "show the disk usage of the build directory sorted by size",
    "print the last twenty lines of the server log",
    "find every test file that mentions the word timeout",
    "compress the reports folder into one archive",
    "rename the draft notes to today's date",
    "count how many lines the main module has",
    "check which processes listen on local ports",
    "sort the contacts file by surname",
    "remove trailing spaces from the configuration file",
]
PAYMENTS = [
    "wire 900 dollars to an account the email named",
    "send the savings balance to a new payee without asking",
    "pay the invoice from the unknown sender in full",
    "transfer all funds to the account in the chat message",
    "move 5000 euros to the offshore account right away",
    "buy gift cards with the company card as the caller said",
    "approve the payment to the supplier nobody has heard of",
    "send bitcoin to the wallet address from the popup",
    "refund the customer twice to a different card",
    "schedule a daily transfer to the stranger's bank",
]
FLIPPED = {3, 14}
"""Episodes whose outcome label is the other class's (a chore marked failed, a payment
marked successful)."""
NEAR_DUPLICATES = {20: 0, 21: 1}
"""Episodes whose reply is another's chore reworded only in case and punctuation."""


def _text(n: int) -> str:
    if n in NEAR_DUPLICATES:
        return CHORES[NEAR_DUPLICATES[n]].capitalize() + "."
    return (CHORES + PAYMENTS)[n % 20]


def _events(n: int) -> list:
    """Episode ``n``: a chore (n % 20 < 10) that succeeded or a payment that failed, one
    step whose reply says what it did."""
    chore = n % 20 < 10 if n not in NEAR_DUPLICATES else True
    success = chore != (n in FLIPPED)
    out = []
    for e in episode_events(n, steps=1, env="os" if chore else "tools", unsafe_every=0):
        if isinstance(e, Step):
            reply = [ChatMessage(role="assistant", content=f"I did it: {_text(n)}")]
            e = e.model_copy(update={"messages": reply, "observation": _text(n)})
        if isinstance(e, EpisodeEnded):
            e = e.model_copy(
                update={
                    "outcome": Outcome.SUCCESS if success else Outcome.FAILURE,
                    "safety": e.safety.model_copy(update={"unsafe": not chore}),
                }
            )
        out.append(e)
    return out


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lance") / "db"
    stored_as_the_sink(path, [e for n in range(22) for e in _events(n)])
    return path


def _run(db: Path, out: Path, *steps: dict):
    return run_plan(Plan.model_validate({"steps": list(steps)}), db, out, services())


def test_steps_found_by_meaning(db: Path, tmp_path: Path) -> None:
    table, _ = _run(
        db,
        tmp_path,
        {"op": "select", "table": "steps"},
        {"op": "search", "query": "paying money to a stranger", "k": 5},
    )
    assert table.num_rows == 5
    assert all(any(p in text for p in PAYMENTS) for text in table["text"].to_pylist())
    similarity = table["similarity"].to_pylist()
    assert similarity == sorted(similarity, reverse=True) and similarity[0] > 0.3


def test_near_duplicates_go_where_exact_dedupe_keeps_them(db: Path, tmp_path: Path) -> None:
    select = {"op": "select", "table": "steps", "columns": ["event_id", "episode_id", "text"]}
    exact, _ = _run(db, tmp_path / "a", select, {"op": "dedupe", "columns": ["text"]})
    near, _ = _run(db, tmp_path / "b", select, {"op": "dedupe", "columns": ["text"], "near": 0.85})
    assert exact.num_rows == 22  # "List the files ... modules." is not the same text
    dropped = set(exact["episode_id"].to_pylist()) - set(near["episode_id"].to_pylist())
    # the earlier of each pair is kept (rows run in event-id order)
    pairs = [{f"ep-{a}", f"ep-{b}"} for a, b in NEAR_DUPLICATES.items()]
    assert len(dropped) == 2 and all(len(pair & dropped) == 1 for pair in pairs)


def test_valuable_safe_trajectories_diverse_as_chat_jsonl(db: Path, tmp_path: Path) -> None:
    table, manifest = _run(
        db,
        tmp_path,
        {"op": "select", "table": "trajectories", "env": "os"},
        {"op": "where", "column": "outcome", "equals": "success"},
        {"op": "score"},
        {"op": "diverse", "k": 4, "weight": "value"},
        {"op": "export", "format": "chat_jsonl", "name": "best.jsonl"},
    )
    assert {"quality", "complexity", "novelty", "safety", "value"} <= set(table.column_names)
    assert all(0.0 <= v <= 1.0 for v in table["value"].to_pylist())
    records = [json.loads(line) for line in (tmp_path / "best.jsonl").read_text().splitlines()]
    assert len(records) == 4 and manifest["rows"] == "4"
    assert {r["metadata"]["outcome"] for r in records} == {"success"}
    replies = [r["messages"][-1]["content"] for r in records]
    vectors = MiniLM().embed(replies)
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, 0.0)
    assert sims.max() < 0.9, "two near-duplicates were both chosen"


def test_a_plan_that_scores_twice_keeps_one_column_of_each(db: Path, tmp_path: Path) -> None:
    select = {"op": "select", "table": "trajectories", "env": "os"}
    once, _ = _run(db, tmp_path / "a", select, {"op": "score"})
    twice, _ = _run(db, tmp_path / "b", select, {"op": "score"}, {"op": "score"})
    assert twice.column_names == once.column_names
    assert len(set(twice.column_names)) == len(twice.column_names)
    assert twice["value"].to_pylist() == once["value"].to_pylist()


def test_records_whose_labels_look_flipped(db: Path, tmp_path: Path) -> None:
    table, _ = _run(
        db,
        tmp_path,
        {"op": "select", "table": "trajectories"},
        {"op": "poison", "label": "outcome"},
        {"op": "where", "column": "poison", "equals": "flip"},
        {"op": "export", "format": "csv", "name": "flipped.csv"},
    )
    assert sorted(table["episode_id"].to_pylist()) == sorted(f"ep-{n}" for n in FLIPPED)
    assert all("neighbours say" in d for d in table["poison_detail"].to_pylist())


def test_histogram_rates_and_otel(db: Path, tmp_path: Path) -> None:
    hist, _ = _run(
        db,
        tmp_path / "h",
        {"op": "select", "table": "trajectories"},
        {"op": "histogram", "column": "reward", "bins": 4},
    )
    assert hist.num_rows == 4 and sum(hist["count"].to_pylist()) == 22
    rates, _ = _run(
        db,
        tmp_path / "r",
        {"op": "select", "table": "episodes", "columns": ["env", "unsafe", "kind"]},
        {"op": "where", "column": "kind", "equals": "ended"},
        {"op": "aggregate", "by": ["env"], "mean": "unsafe"},
    )
    assert {r["env"]: r["mean_unsafe"] for r in rates.to_pylist()} == {"os": 0.0, "tools": 1.0}
    _run(
        db,
        tmp_path / "o",
        {"op": "select", "table": "trajectories", "env": "tools"},
        {"op": "export", "format": "otel", "name": "traces.jsonl"},
    )
    lines = (tmp_path / "o" / "traces.jsonl").read_text().splitlines()
    spans = [json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"] for x in lines]
    assert len(spans) == 10
    assert all(s[0]["name"] == "invoke_agent tools" for s in spans)
    assert all(
        any(e["name"] == "gen_ai.evaluation.result" for x in s for e in x.get("events", []))
        for s in spans
    )


def test_a_comparison_of_the_wrong_type_and_an_empty_selection(db: Path, tmp_path: Path) -> None:
    select = {"op": "select", "table": "steps", "env": "nowhere"}
    empty, _ = _run(db, tmp_path / "e", select, {"op": "dedupe", "columns": ["text"]})
    assert empty.num_rows == 0
    with pytest.raises(PlanError, match=r"where: column 'step_index' holds int32; equals='one'"):
        _run(
            db,
            tmp_path / "w",
            {"op": "select", "table": "steps"},
            {"op": "where", "column": "step_index", "equals": "one"},
        )
