"""The auditor's memory of labelled cases: what people said about this deployment's agents.

A person's label (safe or unsafe, per episode) is kept with the episode's meaning
(:func:`case_vector`: what was asked and what the agent did, each embedded by the deep
tier's MiniLM). A new episode is judged by its nearest labelled neighbours, beside the
calibrated checkers' probability ``p0``::

    p = (sum_i w_i y_i + m * p0) / (sum_i w_i + m),  m = PRIOR_WEIGHT
    w_i = exp((s_i - 1) / TEMPERATURE) over the NEIGHBOURS most similar cases (cosine s_i)

What ``p`` may decide is measured on the labels themselves, leave-one-out (each labelled
case judged by the others), in the calibration's bands and with its rule
(:mod:`.calibration`): ``p`` in a band whose leave-one-out precision reached 90 % blocks,
80 % warns; ``1 - p`` in a band where "safe" was right 80 % of the time clears the
episode (its uncertain or warning verdict becomes allow). Until the labels show a band
precise, the memory decides nothing there: a few labels never silence the checkers.
A case that was itself labelled takes its label. Every memory has a :attr:`~LabelMemory.
version` (the hash of its labels), so a verdict names the labels it was given under.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...infra.embedding import TextEmbedder
from ...schemas import Decision, Severity, Step
from .calibration import BANDS, WARN_PRECISION, Cell, band
from .text import final_reply, task_text, tool_arguments, tool_name

NEIGHBOURS = 7
TEMPERATURE = 0.05
"""A neighbour 0.05 less similar than an identical case weighs e times less."""
PRIOR_WEIGHT = 0.5
"""The checkers' probability counts as half a perfectly similar labelled case (a weight
fitted per deployment by leave-one-out log loss was tried and lost: it chose small weights
on the queue's labels and blurred sources the checkers already separate)."""
QUIET_PRIOR = 0.2
"""The checkers' probability for an episode where nothing fired (about the share unsafe
among such episodes of the calibration's sources)."""
DUPLICATE = 0.98
"""Cases at least this similar show the queue nothing new: one of them is asked."""


def case_texts(steps: Sequence[Step]) -> tuple[str, list[str]]:
    """What was asked in an episode (the user's words, their end kept), and what the agent
    did: one line per step (its call and the start of what came back, or its reply)."""
    if not steps:
        return "", []
    request = task_text(steps[-1], list(steps[:-1]))[-600:]
    conduct = []
    for step in steps:
        name = tool_name(step)
        if name:
            returned = " ".join((step.tool_result or "").split())[:200]
            conduct.append(f"{name}({tool_arguments(step)[:300]}) -> {returned}")
        elif reply := final_reply(step) or step.action.text:
            conduct.append(f"reply: {reply[:400]}")
    return request, conduct


def case_vector(steps: Sequence[Step], embedder: TextEmbedder) -> np.ndarray:
    """One unit vector for an episode: its request's embedding and the mean of its steps',
    each normalised, joined (cosine of two cases = the mean of the two cosines)."""
    request, conduct = case_texts(steps)
    rows = embedder.embed([request or "(no request)", *(conduct or ["(nothing done)"])])
    asked = _unit(rows[0])
    did = _unit(np.mean([_unit(r) for r in rows[1:]], axis=0))
    return np.concatenate([asked, did]).astype(np.float32) / np.sqrt(2.0)


def _unit(v: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


@dataclass(frozen=True, slots=True)
class LabelledCase:
    """One labelled episode as the memory keeps it."""

    case_id: str
    vector: np.ndarray
    prior: float
    """The checkers' calibrated probability for it when it was labelled."""
    unsafe: bool
    risk_type: str = ""
    labeller: str = ""


@dataclass(frozen=True, slots=True)
class Recall:
    """What the memory makes of one episode."""

    probability: float
    decision: Decision | None
    """block or warn (the labels say unsafe, precisely enough), allow (they clear it), or
    None (they decide nothing here)."""
    neighbours: list[tuple[str, float, bool]] = field(default_factory=list)
    """The nearest labelled cases: id, similarity, unsafe."""
    labelled: bool = False
    """The episode was itself labelled (its label decided)."""

    def reason(self, version: str) -> str:
        """One line for ``--explain`` and the verdict's reason."""
        if self.labelled:
            said = "unsafe" if self.decision == Decision.BLOCK else "safe"
            return f"labelled {said} by a person (labels {version})"
        near = ", ".join(
            f"{cid} ({'unsafe' if bad else 'safe'}, {sim:.2f})" for cid, sim, bad in self.neighbours
        )
        return f"labels {version}: p={self.probability:.2f} from nearest labelled cases {near}"


class LabelMemory:
    """Labelled cases of one deployment and what they may decide (module docstring)."""

    def __init__(self, cases: Sequence[LabelledCase]) -> None:
        latest: dict[str, LabelledCase] = {}
        for case in cases:  # a later label of the same case replaces the earlier one
            latest[case.case_id] = case
        self.cases = list(latest.values())
        self.ids = [c.case_id for c in self.cases]
        self._index = {cid: i for i, cid in enumerate(self.ids)}
        dim = self.cases[0].vector.shape[0] if self.cases else 0
        self._vectors = (
            np.stack([c.vector for c in self.cases]) if self.cases else np.zeros((0, dim))
        )
        self._labels = np.asarray([c.unsafe for c in self.cases], dtype=float)
        self.version = _version(self.cases)
        self.unsafe_cells, self.safe_cells = self._measure()

    def __len__(self) -> int:
        return len(self.cases)

    def probability(self, vector: np.ndarray, prior: float, skip: int | None = None) -> float:
        """``p`` of one episode (``skip``: leave that labelled case out)."""
        p, _ = self._vote(vector, prior, skip)
        return p

    def _vote(
        self, vector: np.ndarray, prior: float, skip: int | None = None
    ) -> tuple[float, np.ndarray]:
        if not self.cases:
            return prior, np.zeros(0, dtype=int)
        sims = self._vectors @ vector
        if skip is not None:
            sims = sims.copy()
            sims[skip] = -np.inf
        k = min(NEIGHBOURS, len(sims) - (skip is not None))
        if k <= 0:
            return prior, np.zeros(0, dtype=int)
        nearest = np.argpartition(-sims, k - 1)[:k]
        nearest = nearest[np.argsort(-sims[nearest])]
        weights = np.exp((sims[nearest] - 1.0) / TEMPERATURE)
        m = PRIOR_WEIGHT
        p = (float(weights @ self._labels[nearest]) + m * prior) / (float(weights.sum()) + m)
        return p, nearest

    def recall(self, case_id: str, vector: np.ndarray, prior: float) -> Recall:
        """What the labels say of one episode (its own label, if it has one)."""
        own = self._index.get(case_id)
        if own is not None:
            unsafe = bool(self._labels[own])
            decision = Decision.BLOCK if unsafe else Decision.ALLOW
            return Recall(float(unsafe), decision, [], labelled=True)
        p, nearest = self._vote(vector, prior)
        near = [
            (self.ids[i], float(self._vectors[i] @ vector), bool(self._labels[i]))
            for i in nearest[:3]
        ]
        return Recall(p, self._decide(p), near)

    def _decide(self, p: float) -> Decision | None:
        index = band(p)
        if index is not None:
            cell = self.unsafe_cells[index]
            decision = cell.decision(Severity.HIGH) if cell else Decision.UNCERTAIN
            return None if decision == Decision.UNCERTAIN else decision
        index = band(1.0 - p)
        cell = self.safe_cells[index] if index is not None else None
        if cell is not None and cell.lower >= WARN_PRECISION:
            return Decision.ALLOW
        return None

    def _measure(self) -> tuple[list[Cell | None], list[Cell | None]]:
        """Leave-one-out: per band of ``p``, how often unsafe was right (``p`` high) and
        how often safe was right (``1 - p`` high)."""
        unsafe = [[0.0, 0.0] for _ in BANDS]
        safe = [[0.0, 0.0] for _ in BANDS]
        for i, case in enumerate(self.cases):
            p = self.probability(case.vector, case.prior, skip=i)
            if (index := band(p)) is not None:
                unsafe[index][0] += case.unsafe
                unsafe[index][1] += 1
            elif (index := band(1.0 - p)) is not None:
                safe[index][0] += not case.unsafe
                safe[index][1] += 1
        # a band's cell counts its own firings and those of the bands above it (p >= edge)
        return _cumulative(unsafe), _cumulative(safe)


def _cumulative(counts: list[list[float]]) -> list[Cell | None]:
    cells: list[Cell | None] = []
    for index in range(len(counts)):
        right = sum(c[0] for c in counts[index:])
        total = sum(c[1] for c in counts[index:])
        cells.append(Cell(right, total) if total else None)
    return cells


def _version(cases: Sequence[LabelledCase]) -> str:
    digest = hashlib.sha256()
    for case in sorted(cases, key=lambda c: c.case_id):
        digest.update(f"{case.case_id}\0{int(case.unsafe)}\n".encode())
    return f"{len(cases)}:{digest.hexdigest()[:10]}"


def combine(prior: Decision, recall: Recall) -> Decision:
    """The episode's decision given the checkers' (``prior``) and the labels': a case's own
    label decides; otherwise the labels may raise it to warn or block, or clear an
    uncertain or warning verdict, never a block the checkers measured."""
    if recall.labelled and recall.decision is not None:
        return recall.decision
    if recall.decision in (Decision.BLOCK, Decision.WARN):
        if prior == Decision.BLOCK:
            return prior
        return recall.decision
    if recall.decision == Decision.ALLOW and prior in (Decision.UNCERTAIN, Decision.WARN):
        return Decision.ALLOW
    return prior


def queue_order(
    probabilities: Sequence[float],
    decisions: Sequence[Decision],
    vectors: np.ndarray,
    labelled: np.ndarray | None = None,
    limit: int | None = None,
) -> list[int]:
    """The review queue: indices of unlabelled episodes, most informative first. Uncertain
    verdicts (something fired, nothing decided) before the rest; within each, the episode
    most like many others and least like any labelled or already queued one (its density
    among them less its nearest similarity to those), then the one whose ``p`` is nearest
    0.5: each answer teaches the memory about many episodes, and none repeats a lesson.
    An episode nearly identical to one labelled or queued (:data:`DUPLICATE`) comes last."""
    n = len(probabilities)
    limit = n if limit is None else min(limit, n)
    density = _density(vectors)
    nearest = np.full(n, -1.0)
    if labelled is not None and len(labelled):
        nearest = np.max(vectors @ labelled.T, axis=1)
    uncertain = np.asarray([d == Decision.UNCERTAIN for d in decisions])
    doubt = 1.0 - 2.0 * np.abs(np.asarray(probabilities, dtype=float) - 0.5)
    chosen: list[int] = []
    open_ = np.ones(n, dtype=bool)
    while len(chosen) < limit and open_.any():
        worth = density - np.maximum(nearest, 0.0) + 0.1 * doubt
        worth = worth + 10.0 * uncertain - 100.0 * (nearest >= DUPLICATE)
        worth[~open_] = -np.inf
        pick = int(np.argmax(worth))
        chosen.append(pick)
        open_[pick] = False
        nearest = np.maximum(nearest, vectors @ vectors[pick])
    return chosen


DENSITY_SAMPLE = 2000
DENSITY_NEIGHBOURS = 20


def _density(vectors: np.ndarray) -> np.ndarray:
    """Each episode's mean similarity to its :data:`DENSITY_NEIGHBOURS` nearest (among at
    most :data:`DENSITY_SAMPLE` of them, taken evenly)."""
    if len(vectors) < 2:
        return np.zeros(len(vectors))
    step = max(1, len(vectors) // DENSITY_SAMPLE)
    sample = vectors[::step]
    sims = vectors @ sample.T
    k = min(DENSITY_NEIGHBOURS, sample.shape[0] - 1)
    top = -np.partition(-sims, k, axis=1)[:, 1 : k + 1]
    return top.mean(axis=1)
