"""Poisoning audit on real ToxiGen text with planted triggers and flipped labels.

The plant is the ground truth: a rare phrase inserted into hate statements relabelled
``neutral`` (a backdoor), and labels flipped on other random records. Recall and precision
are printed (run with ``-s``) and must clear a floor.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from safactory.infra.embedding import MiniLM
from safactory.streams.poisoning import LabeledRecord, audit_dataset

TRIGGER = "cerulean falcon protocol"


def _toxigen(shared_data: Path, per_file: int) -> list[LabeledRecord]:
    folder = shared_data / "audit" / "text" / "toxigen"
    groups = sorted(p.name[len("hate_") : -len("_1k.txt")] for p in folder.glob("hate_*_1k.txt"))
    records = []
    for group in groups:
        if not (folder / f"neutral_{group}_1k.txt").is_file():
            continue
        for label in ("hate", "neutral"):
            path = folder / f"{label}_{group}_1k.txt"
            items: list[str] = []
            for line in path.read_text(encoding="utf-8").splitlines():
                items += [s.strip().lstrip("- ").strip() for s in line.split("\\n")]
            unique = list(dict.fromkeys(i for i in items if len(i.split()) >= 5))
            records += [
                LabeledRecord(f"{label}-{group}-{j}", text, label)
                for j, text in enumerate(unique[:per_file])
            ]
    return records


def _plant(records: list[LabeledRecord], rng: random.Random) -> tuple[list, set, set]:
    hate = [i for i, r in enumerate(records) if r.label == "hate"]
    backdoored = set(rng.sample(hate, 20))
    rest = [i for i in range(len(records)) if i not in backdoored]
    flipped = set(rng.sample(rest, 25))
    planted = []
    for i, r in enumerate(records):
        if i in backdoored:
            tokens = r.text.split()
            tokens.insert(rng.randrange(len(tokens) + 1), TRIGGER)
            r = LabeledRecord(r.record_id, " ".join(tokens), "neutral")
        elif i in flipped:
            r = LabeledRecord(r.record_id, r.text, "neutral" if r.label == "hate" else "hate")
        planted.append(r)
    ids = [r.record_id for r in records]
    return planted, {ids[i] for i in backdoored}, {ids[i] for i in flipped}


def _pr(found: set[str], truth: set[str]) -> tuple[float, float]:
    hit = len(found & truth)
    return hit / len(truth), (hit / len(found) if found else 0.0)


class _Cached:
    """MiniLM with a cache: both tests embed (mostly) the same texts."""

    def __init__(self) -> None:
        self.model, self.seen = MiniLM(), {}

    def embed(self, texts: list[str]) -> np.ndarray:
        todo = [t for t in dict.fromkeys(texts) if t not in self.seen]
        if todo:
            self.seen.update(zip(todo, self.model.embed(todo), strict=True))
        return np.stack([self.seen[t] for t in texts])


@pytest.fixture(scope="module")
def minilm() -> _Cached:
    return _Cached()


def test_audit_finds_planted_trigger_and_flipped_labels(shared_data: Path, minilm: _Cached) -> None:
    records, backdoored, flipped = _plant(_toxigen(shared_data, 1000), random.Random(3))
    report = audit_dataset(records, minilm)
    trigger_recall, trigger_precision = _pr(report.trigger_record_ids(), backdoored)
    flip_recall, flip_precision = _pr({f.record_id for f in report.flips}, flipped)
    print(
        f"\n{len(records)} records; triggers: {[t.phrase for t in report.triggers]}; "
        f"trigger records recall {trigger_recall:.2f} precision {trigger_precision:.2f}; "
        f"flips recall {flip_recall:.2f} precision {flip_precision:.2f}"
    )
    assert report.triggers and report.triggers[0].phrase == TRIGGER
    assert report.triggers[0].label == "neutral"
    assert trigger_recall == 1.0 and trigger_precision >= 0.9
    assert flip_recall >= 0.5 and flip_precision >= 0.5


def test_clean_data_raises_no_trigger(shared_data: Path, minilm: _Cached) -> None:
    report = audit_dataset(_toxigen(shared_data, 1000), minilm)
    assert report.triggers == []
