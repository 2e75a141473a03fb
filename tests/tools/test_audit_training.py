"""Smoke tests of the auditor's training scripts (``safactory.tools.audit_training``): the
examples they build, from the written data and from a few rows of each public source, are
deterministic, labelled as documented and split stably; the threshold and AUC they report
are right on small hand-checked cases. No embedding model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import safactory.tools
from safactory.tools.audit_training import datasets as ds
from safactory.tools.audit_training.deep_heads import (
    auc,
    best_threshold,
    outcome_examples,
    request_examples,
)

ROWS = 4
"""Rows kept of each public file: enough for both labels, small enough to stay fast."""
REQUEST_SOURCES = (
    "text/halueval/qa_one-turn_data.json",
    "text/cyberseceval/mitre_frr.json",
    "raw/privacylens_main_data.json",
    *(f"raw/toolsword_data_{s}.json" for s in ("MQ", *ds.TOOLSWORD_BENIGN)),
)


def few(source: Path, target: Path, rows: int = ROWS) -> None:
    """``source`` cut to its first ``rows`` records (JSON lists, lists in a JSON object,
    JSON lines), written to ``target``."""
    text = source.read_text(encoding="utf-8")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:  # JSON lines (HaluEval's ``.json`` is one too)
        kept = "\n".join(text.splitlines()[:rows]) + "\n"
    else:
        if isinstance(value, dict):
            value = {k: v[:rows] if isinstance(v, list) else v for k, v in value.items()}
        kept = json.dumps(value[:rows] if isinstance(value, list) else value)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(kept, encoding="utf-8")


@pytest.fixture
def tiny(shared_data: Path, tmp_path: Path) -> Path:
    """A data folder laid out like ``shared/data/audit``, a few rows of each source."""
    audit = shared_data / "audit"
    for rel in REQUEST_SOURCES:
        few(audit / rel, tmp_path / rel)
    jbb = sorted((audit / "text/jailbreakbench").rglob("*.json"))[0]
    few(jbb, tmp_path / jbb.relative_to(audit))
    return tmp_path


def test_the_written_data_ships_in_the_package_and_is_labelled_both_ways() -> None:
    assert ds.OWN_DATA.is_relative_to(Path(safactory.tools.__file__).parent)
    for rows in (ds.own_actions(), ds.env_actions()):
        assert len({r[0] for r in rows}) == len(rows), "keys are unique"
        assert {r[4] for r in rows} == {0, 1}
        for _, tool, arguments, _, _ in rows:
            assert tool and isinstance(json.loads(arguments), dict)
    assert {r[3] for r in ds.own_outcomes()} == {0, 1}
    assert {r[2] for r in ds.own_requests()} == {0, 1}


def test_a_split_is_stable_about_one_in_five_and_shared_by_a_records_pieces() -> None:
    keys = [f"rjudge:Finance:{i}" for i in range(1000)]
    splits = [ds.split_of(k) for k in keys]
    assert splits == [ds.split_of(k) for k in keys]
    assert 150 <= splits.count("val") <= 250
    assert {ds.split_of(f"{k}#first") == ds.split_of(f"{k}#last") for k in keys} == {True}


def test_the_request_corpus_from_a_few_rows_of_each_source(tiny: Path) -> None:
    corpus = ds.corpus_request_harm(tiny)
    assert corpus == ds.corpus_request_harm(tiny), "built the same on every run"
    labels = {key: label for key, _, label in corpus}
    written = ds.own_rows("requests")
    assert {labels[f"own-request:{r['id']}"] for r in written} == {0, 1}
    for r in written:
        assert labels[f"own-request:{r['id']}"] == int(r["harmful"])
    by_source = {
        prefix: {label for key, label in labels.items() if key.startswith(prefix)}
        for prefix in ("frr:", "halu-q:", "privacylens:", "jbb-goal:", "toolsword:MQ:")
    }
    assert by_source == {
        "frr:": {0},
        "halu-q:": {0},
        "privacylens:": {0},
        "jbb-goal:": {1},
        "toolsword:MQ:": {1},
    }
    assert sum(k.startswith("frr:") for k in labels) == ROWS


def test_twin_requests_share_a_split_group(tiny: Path) -> None:
    groups = {key: group for key, _, _, group in request_examples(tiny)}
    twins = [r for r in ds.own_rows("requests") if r.get("twin")]
    assert twins, "the written requests have benign twins"
    for r in twins:
        assert groups[f"own-request:{r['id']}"] == groups[f"own-request:{r['twin']}"]


def test_outcome_examples_leave_out_the_own_environments_on_request() -> None:
    every = {key for key, *_ in outcome_examples()}
    without = {key for key, *_ in outcome_examples(exclude=["own-envs"])}
    assert without < every
    assert {k.split(":")[0] for k in every - without} == {"env-outcome"}


def test_threshold_and_auc_on_hand_checked_cases() -> None:
    y = np.array([0, 0, 1, 1])
    assert auc(y, np.array([0.1, 0.4, 0.35, 0.8])) == 0.75
    assert auc(y, np.array([0.5, 0.5, 0.5, 0.5])) == 0.5
    # Cuts 0.5 and 0.7 keep 0.7 (wrong) and 0.9 (right): precision 1/2; 0.9 alone is precise.
    assert best_threshold(np.array([0, 1, 0, 1]), np.array([0.2, 0.9, 0.7, 0.3])) == 0.9
