"""The composite data-value score (DataElf-style) and diverse high-value subset selection.

Per record: ``quality`` and ``complexity`` heuristics, ``ifd`` from a causal LM (optional),
``novelty`` from embeddings, ``safety`` from verdicts. The composite is a weighted mean of
the components in 0..1; selection runs greedy k-center weighted by the composite, so the
subset is both valuable and diverse (duplicates add nothing once one copy is chosen).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...infra.embedding import TextEmbedder
from ...schemas import Score, Severity, Trajectory, Verdict, derive_id
from .diversity import k_center, novelty
from .heuristics import complexity, quality

if TYPE_CHECKING:  # torch is imported only when a language model is given
    from .perplexity import LMScorer

SCORER = "data-value"
SCORER_VERSION = "1"


@dataclass(frozen=True)
class Record:
    """What is scored: an instruction, a response, and how safe it was (1 = no concern)."""

    record_id: str
    instruction: str
    response: str
    safety: float = 1.0


def safety_from_verdicts(verdicts: Sequence[Verdict]) -> float:
    """1 minus the worst verdict severity, scaled to 0..1 (critical → 0)."""
    worst = max((v.severity.rank for v in verdicts), default=0)
    return 1.0 - worst / Severity.CRITICAL.rank


@dataclass(frozen=True)
class Weights:
    """Weights of the composite (renormalised over the components present)."""

    quality: float = 0.35
    complexity: float = 0.15
    ifd: float = 0.15
    novelty: float = 0.15
    safety: float = 0.20


@dataclass
class Scored:
    """A record's component scores and composite."""

    record: Record
    components: dict[str, float] = field(default_factory=dict)
    composite: float = 0.0


def record_from_trajectory(t: Trajectory, verdicts: Sequence[Verdict] | None = None) -> Record:
    """Instruction = prompt and observations the agent saw; response = what it said.

    Safety comes from the episode's verdicts when given, else from the trajectory's own
    ``safety`` reward component (the verdicts as the reward rule weighed them).
    """
    instruction, response = [], []
    for m in [*t.prompt, *(m for s in t.steps for m in s.messages)]:
        text = m.content if isinstance(m.content, str) else ""
        (response if m.role == "assistant" else instruction).append(text)
    if verdicts is not None:
        safety = safety_from_verdicts(verdicts)
    else:
        safety = min(1.0, max(0.0, 1.0 + t.reward_components.get("safety", 0.0)))
    return Record(t.episode_id, "\n".join(instruction), "\n".join(response), safety)


def score_records(
    records: Sequence[Record],
    embedder: TextEmbedder,
    lm: LMScorer | None = None,
    weights: Weights = Weights(),
) -> tuple[list[Scored], np.ndarray]:
    """Score every record; returns the scores and the embeddings (for selection)."""
    vectors = embedder.embed([f"{r.instruction}\n{r.response}" for r in records])
    near = novelty(vectors)
    out = []
    for i, r in enumerate(records):
        parts = {
            "quality": quality(r.response),
            "complexity": complexity(r.instruction),
            "novelty": float(near[i]),
            "safety": r.safety,
        }
        if lm is not None and r.response.strip():
            parts["ifd_raw"] = lm.ifd(r.instruction, r.response)
            parts["ifd"] = float(min(1.0, parts["ifd_raw"]))
        used = {k: getattr(weights, k) for k in parts if hasattr(weights, k)}
        total = sum(used.values()) or 1.0
        composite = sum(parts[k] * w for k, w in used.items()) / total
        # a record with no usable response has no value whatever else it has
        composite *= 1.0 if parts["quality"] > 0 else 0.0
        out.append(Scored(r, parts, round(composite, 6)))
    return out, vectors


def select_diverse(scored: Sequence[Scored], vectors: np.ndarray, k: int) -> list[Scored]:
    """``k`` records, high composite and far apart (composite-weighted greedy k-center)."""
    weights = np.array([s.composite for s in scored])
    return [scored[i] for i in k_center(vectors, k, weights)]


def value_table(
    trajectories: Sequence[Trajectory], embedder: TextEmbedder, lm: LMScorer | None = None
) -> list[dict[str, float]]:
    """Each trajectory's components (with ``lm``: ``ifd`` and the response's
    ``perplexity`` too) and its composite as ``value``, for a table of them (DataElf's
    ``score``)."""
    records = [record_from_trajectory(t) for t in trajectories]
    scored, _ = score_records(records, embedder, lm)
    rows = []
    for s in scored:
        row = {k: v for k, v in s.components.items() if k != "ifd_raw"}
        if lm is not None:
            text = s.record.response
            row["perplexity"] = round(lm.perplexity(text), 4) if text.strip() else float("nan")
        rows.append({**row, "value": s.composite})
    return rows


def score_event(s: Scored, producer_version: str = SCORER_VERSION) -> Score:
    """The ``sf.scores`` event of a scored trajectory (deterministic id)."""
    return Score(
        event_id=derive_id(SCORER, producer_version, s.record.record_id),
        episode_id=s.record.record_id,
        scorer=SCORER,
        scorer_version=producer_version,
        scores=s.components,
        composite=s.composite,
    )
