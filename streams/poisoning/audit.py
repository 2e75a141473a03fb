"""Audit a labelled dataset for poisoning: backdoor triggers and label flips.

* **Backdoor trigger** — a rare phrase (word 1- to 3-gram in at most ``max_doc_share`` of
  the records, at least ``min_support`` times) whose records nearly all carry one label,
  while their nearest neighbours *without* the phrase mostly carry another (the phrase, not
  the content, decides the label), and whose records, with the phrase removed, are no
  more alike than the dataset at large (a natural phrase brings its topic along; an
  inserted trigger sits in unrelated texts).
* **Label flip** — a record whose ``k`` nearest neighbours by embedding mostly disagree
  with its label (agreement at most ``flip_agreement``), not explained by a trigger.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ...infra.embedding import TextEmbedder
from ..scoring.heuristics import words


@dataclass(frozen=True)
class LabeledRecord:
    """One (instruction or text, response or label) record."""

    record_id: str
    text: str
    label: str


@dataclass(frozen=True)
class TriggerFinding:
    """A phrase that looks like a backdoor trigger."""

    phrase: str
    label: str
    support: int
    purity: float
    neighbour_disagreement: float
    coherence_gain: float
    """Mean similarity of its records (phrase removed) minus the dataset's mean similarity."""
    record_ids: tuple[str, ...]


@dataclass(frozen=True)
class FlipFinding:
    """A record whose label its embedding neighbourhood contradicts."""

    record_id: str
    label: str
    neighbour_label: str
    agreement: float


@dataclass
class PoisoningReport:
    """Everything the audit flagged."""

    triggers: list[TriggerFinding] = field(default_factory=list)
    flips: list[FlipFinding] = field(default_factory=list)

    def trigger_record_ids(self) -> set[str]:
        """Records that carry a flagged trigger."""
        return {r for t in self.triggers for r in t.record_ids}


def _ngrams(text: str, max_n: int) -> set[str]:
    tokens = words(text)
    return {
        " ".join(tokens[i : i + n]) for n in range(1, max_n + 1) for i in range(len(tokens) - n + 1)
    }


def audit_dataset(
    records: Sequence[LabeledRecord],
    embedder: TextEmbedder,
    *,
    k: int = 10,
    min_support: int = 5,
    max_doc_share: float = 0.05,
    min_purity: float = 0.9,
    min_disagreement: float = 0.6,
    max_coherence_gain: float = 0.1,
    flip_agreement: float = 0.2,
    max_n: int = 3,
) -> PoisoningReport:
    """Flag backdoor triggers and label flips in ``records``."""
    n = len(records)
    labels = np.array([r.label for r in records])
    vectors = embedder.embed([r.text for r in records])
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    candidates = _triggers(
        records, labels, sims, k, min_support, max_doc_share, min_purity, min_disagreement, max_n
    )
    finite = np.isfinite(sims)
    baseline = float(sims[finite].mean()) if finite.any() else 0.0
    report = PoisoningReport()
    by_id = {r.record_id: r for r in records}
    for found in candidates:
        gain = _coherence([by_id[i].text for i in found.record_ids], found.phrase, embedder)
        found = replace(found, coherence_gain=round(gain - baseline, 4))
        if found.coherence_gain <= max_coherence_gain:
            report.triggers.append(found)
    explained = report.trigger_record_ids()
    for i in range(n):
        if records[i].record_id in explained:
            continue
        agreement, other = _neighbour_vote(sims[i], labels, labels[i], k)
        if agreement <= flip_agreement:
            report.flips.append(
                FlipFinding(records[i].record_id, str(labels[i]), other, round(agreement, 4))
            )
    return report


def findings(
    ids: Sequence[str], texts: Sequence[str], labels: Sequence[str], embedder: TextEmbedder
) -> list[tuple[str, str]]:
    """Each record's finding: ``("trigger", phrase)``, ``("flip", "neighbours say <label>
    (agreement a)")`` or ``("", "")``, in order (DataElf's ``poison``)."""
    records = [LabeledRecord(i, t, str(lab)) for i, t, lab in zip(ids, texts, labels, strict=True)]
    report = audit_dataset(records, embedder, k=min(10, max(1, len(records) - 1)))
    found = {i: ("", "") for i in ids}
    for flip in report.flips:
        why = f"neighbours say {flip.neighbour_label} (agreement {flip.agreement:.2f})"
        found[flip.record_id] = ("flip", why)
    for trigger in report.triggers:
        for record_id in trigger.record_ids:
            found[record_id] = ("trigger", trigger.phrase)
    return [found[i] for i in ids]


def _neighbour_vote(
    row: np.ndarray, labels: np.ndarray, label: str, k: int, exclude: np.ndarray | None = None
) -> tuple[float, str]:
    row = row.copy()
    if exclude is not None:
        row[exclude] = -np.inf
    nearest = np.argpartition(-row, k)[:k]
    votes = Counter(labels[nearest].tolist())
    other = max((lab for lab in votes if lab != label), key=votes.__getitem__, default=label)
    return votes.get(label, 0) / k, str(other)


def _triggers(
    records: Sequence[LabeledRecord],
    labels: np.ndarray,
    sims: np.ndarray,
    k: int,
    min_support: int,
    max_doc_share: float,
    min_purity: float,
    min_disagreement: float,
    max_n: int,
) -> list[TriggerFinding]:
    holders: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        for gram in _ngrams(r.text, max_n):
            holders[gram].append(i)
    limit = max(min_support, int(max_doc_share * len(records)))
    found: list[TriggerFinding] = []
    for phrase, idx in holders.items():
        if not min_support <= len(idx) <= limit:
            continue
        label, count = Counter(labels[idx].tolist()).most_common(1)[0]
        purity = count / len(idx)
        if purity < min_purity:
            continue
        members = np.array(idx)
        disagreement = float(
            np.mean(
                [1.0 - _neighbour_vote(sims[i], labels, label, k, exclude=members)[0] for i in idx]
            )
        )
        if disagreement >= min_disagreement:
            ids = tuple(records[i].record_id for i in idx)
            found.append(
                TriggerFinding(
                    phrase, str(label), len(idx), round(purity, 4), round(disagreement, 4), 0.0, ids
                )
            )
    return _maximal(found)


def _coherence(texts: list[str], phrase: str, embedder: TextEmbedder) -> float:
    """Mean pairwise cosine similarity of ``texts`` with ``phrase`` cut out."""
    pattern = re.compile(r"\W+".join(map(re.escape, phrase.split())), re.IGNORECASE)
    vectors = embedder.embed([pattern.sub(" ", t) for t in texts])
    sims = vectors @ vectors.T
    n = len(texts)
    return float((sims.sum() - np.trace(sims)) / (n * n - n)) if n > 1 else 1.0


def _maximal(found: list[TriggerFinding]) -> list[TriggerFinding]:
    """Of phrases flagging the same records, keep the longest (the whole trigger)."""
    best: dict[tuple[str, ...], TriggerFinding] = {}
    for f in found:
        key = tuple(sorted(f.record_ids))
        if key not in best or len(f.phrase) > len(best[key].phrase):
            best[key] = f
    return sorted(best.values(), key=lambda f: (-f.support, f.phrase))
