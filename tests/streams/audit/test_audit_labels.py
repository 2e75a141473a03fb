"""The label loop: labels are stored as events, the label memory decides only what its
labels showed it can, and `safactory audit` after `safactory label import` shows the change."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.schemas import Decision
from safactory.sinks.location import LanceLocation
from safactory.streams.audit.memory import (
    LabelledCase,
    LabelMemory,
    Recall,
    combine,
    queue_order,
)
from safactory.tools.casebook import AuditedCase, Casebook
from safactory.tools.review import LabelFileError, ask, label_of, read_label_file

FAST = "harm.beyond_scope,harm.unrequested_action,harm.steered_action"


def _cluster(rng: np.random.Generator, centre: np.ndarray, n: int) -> np.ndarray:
    rows = centre + 0.05 * rng.standard_normal((n, centre.shape[0]))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _two_kinds(n: int) -> tuple[list[LabelledCase], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    bad, good = np.eye(16)[0], np.eye(16)[1]
    cases = [LabelledCase(f"b{i}", v, 0.5, True) for i, v in enumerate(_cluster(rng, bad, n))] + [
        LabelledCase(f"g{i}", v, 0.5, False) for i, v in enumerate(_cluster(rng, good, n))
    ]
    return cases, _cluster(rng, bad, 1)[0], _cluster(rng, good, 1)[0]


def test_enough_labels_decide_their_kind_and_a_few_decide_nothing() -> None:
    cases, new_bad, new_good = _two_kinds(20)
    memory = LabelMemory(cases)
    bad, good = memory.recall("new", new_bad, 0.5), memory.recall("new", new_good, 0.5)
    assert bad.decision == Decision.BLOCK and bad.probability > 0.9
    assert good.decision == Decision.ALLOW and good.probability < 0.1
    assert bad.neighbours and all(unsafe for _, _, unsafe in bad.neighbours)
    few = LabelMemory(_two_kinds(2)[0])
    assert few.recall("new", new_bad, 0.5).decision is None  # 4 labels measure nothing
    own = memory.recall("b3", new_good, 0.5)  # a labelled case takes its own label
    assert own.labelled and own.decision == Decision.BLOCK
    assert memory.version != few.version and memory.version.startswith("40:")


def test_labels_never_clear_a_block_and_raise_or_clear_the_rest() -> None:
    says_safe, says_unsafe = Recall(0.02, Decision.ALLOW), Recall(0.97, Decision.BLOCK)
    assert combine(Decision.BLOCK, says_safe) == Decision.BLOCK
    assert combine(Decision.UNCERTAIN, says_safe) == Decision.ALLOW
    assert combine(Decision.WARN, says_safe) == Decision.ALLOW
    assert combine(Decision.ALLOW, says_unsafe) == Decision.BLOCK
    assert combine(Decision.UNCERTAIN, Recall(0.5, None)) == Decision.UNCERTAIN


def test_the_queue_asks_the_uncertain_first_and_a_near_duplicate_last() -> None:
    vectors = np.eye(4, dtype=np.float32)
    vectors = np.vstack([vectors, vectors[0]])  # case 4 repeats case 0
    decisions = [
        Decision.UNCERTAIN,
        Decision.ALLOW,
        Decision.UNCERTAIN,
        Decision.WARN,
        Decision.UNCERTAIN,
    ]
    order = queue_order([0.9, 0.5, 0.6, 0.45, 0.5], decisions, vectors)
    assert order[:2] == [4, 2]  # uncertain, nearest 0.5 first
    assert 0 in order and order.index(0) == len(order) - 1  # case 0 repeats case 4


def _cases(tmp_path: Path) -> Casebook:
    casebook = Casebook(LanceLocation(str(tmp_path / "db")))
    cases, _, _ = _two_kinds(3)
    casebook.remember(
        [
            AuditedCase(
                c.case_id,
                c.vector,
                0.95 if c.case_id == "b0" else 0.3,
                Decision.BLOCK if c.case_id == "b0" else Decision.UNCERTAIN,
                f"text of {c.case_id}",
                truth=c.case_id == "b1" or None,
            )
            for c in cases
        ]
    )
    return casebook


def test_labels_are_kept_as_events_and_a_doubtful_one_waits_for_a_second_person(
    tmp_path: Path,
) -> None:
    casebook = _cases(tmp_path)
    first = [label_of("g0", False, "ana"), label_of("g1", True, "ana")]
    assert casebook.add(first) == []
    before = casebook.labels()[-1].produced_at
    against = [
        label_of("b0", False, "ana"),
        label_of("b1", False, "ana"),
    ]  # a confident block; the truth
    assert [x.episode_id for x in casebook.add(against)] == ["b0", "b1"]
    assert set(casebook.memory().ids) == {"g0", "g1"}  # the doubtful two wait
    assert casebook.add([label_of("b0", False, "ben")]) == [casebook.labels()[-1]]
    assert set(casebook.memory().ids) == {"g0", "g1", "b0"}  # a second person agreed
    assert set(casebook.memory(as_of=before).ids) == {"g0", "g1"}  # as the labels stood then
    stored = casebook.labels()
    assert [x.labeller for x in stored] == ["ana", "ana", "ana", "ana", "ben"]


def test_the_terminal_review_stores_each_answer(tmp_path: Path) -> None:
    casebook = _cases(tmp_path)
    answers = iter(["u", "obviously", "", "s", "", "q"])
    shown: list[str] = []
    given = ask(casebook, "ana", lambda _: next(answers), shown.append, limit=10)
    assert given == 2
    labels = casebook.labels()
    assert [(x.unsafe, x.reason) for x in labels] == [(True, "obviously"), (False, "")]
    assert all(x.episode_id in "".join(shown) for x in labels)


def test_a_bad_label_file_names_the_line_and_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    path.write_text('{"id": "a", "label": "unsafe"}\n{"id": "b", "label": "maybe"}\n')
    with pytest.raises(LabelFileError, match=r"labels.jsonl:2: field 'label' is 'maybe'"):
        read_label_file(path, "ana")
    path.write_text('{"label": "safe"}\n')
    with pytest.raises(LabelFileError, match=r":1: no episode id; add 'episode_id'"):
        read_label_file(path, "ana")


def test_label_import_changes_the_next_audit_of_the_same_file(
    shared_data: Path, tmp_path: Path
) -> None:
    rjudge = shared_data / "audit/trajectories/rjudge"
    records = json.loads((rjudge / "Finance_harmful.json").read_text())[:6]
    records += json.loads((rjudge / "Finance_benign.json").read_text())[:6]
    traces = tmp_path / "traces.json"
    traces.write_text(json.dumps(records))
    db, first, second = tmp_path / "db", tmp_path / "first.jsonl", tmp_path / "second.jsonl"

    def audit(out: Path) -> dict[str, dict]:
        args = ["audit", str(traces), "--db", str(db), "--out", str(out), "--checkers", FAST]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}

    before = audit(first)
    assert all(row["labels"].startswith("0:") for row in before.values())  # no labels yet
    chosen = [*records[:2], records[6]]
    labels = tmp_path / "labels.jsonl"
    lines = [
        {"id": str(r["id"]), "label": "unsafe" if r["label"] else "safe", "reason": "read it"}
        for r in chosen
    ]
    lines.append({"id": str(records[7]["id"]), "label": "unsafe"})  # against the file's own label
    labels.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    result = CliRunner().invoke(
        app, ["label", "import", str(labels), "--db", str(db), "--by", "ana"]
    )
    assert result.exit_code == 0, result.output
    assert "second look" in result.output and "learns from 3 labelled cases" in result.output
    after = audit(second)
    for r in chosen:
        row = after[str(r["id"])]
        assert row["decision"] == ("block" if r["label"] else "allow")
        assert row["labels"].startswith("3:") and row["labels"] != before[str(r["id"])]["labels"]
        if row["decision"] != before[str(r["id"])]["decision"]:
            assert row["checkers_decision"] == before[str(r["id"])]["decision"]
            assert "labelled" in row["by_labels"]
    assert after[str(records[7]["id"])]["decision"] == before[str(records[7]["id"])]["decision"]
    unlabelled = CliRunner().invoke(
        app, ["audit", str(traces), "--no-labels", "--db", str(db), "--checkers", FAST]
    )
    assert unlabelled.exit_code == 0 and '"labels"' not in unlabelled.stdout
