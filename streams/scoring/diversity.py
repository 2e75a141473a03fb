"""Diversity by embedding: greedy k-center (farthest-point) selection and novelty."""

from __future__ import annotations

import numpy as np


def k_center(vectors: np.ndarray, k: int, weights: np.ndarray | None = None) -> list[int]:
    """Greedy k-center on cosine distance: start at the best-weighted point, then repeatedly
    take the point whose weighted distance to the chosen set is largest.

    ``weights`` (0..1, e.g. a value score) scale each candidate's distance, so among equally
    novel points the more valuable one wins and a near-duplicate (distance ≈ 0) never does.
    """
    n = len(vectors)
    if n == 0 or k <= 0:
        return []
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    chosen = [int(np.argmax(w))]
    nearest = 1.0 - vectors @ vectors[chosen[0]]
    while len(chosen) < min(k, n):
        gain = np.clip(nearest, 0.0, None) * w
        gain[chosen] = -1.0
        pick = int(np.argmax(gain))
        chosen.append(pick)
        nearest = np.minimum(nearest, 1.0 - vectors @ vectors[pick])
    return chosen


def novelty(vectors: np.ndarray) -> np.ndarray:
    """Cosine distance of each point to its nearest other point (0 for an exact duplicate)."""
    if len(vectors) < 2:
        return np.ones(len(vectors))
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    return np.clip(1.0 - sims.max(axis=1), 0.0, 1.0)
