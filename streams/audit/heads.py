"""Small logistic-regression heads on MiniLM embeddings, stored as ``heads/<name>.npz``.

Each file holds ``weight`` (384,), ``bias`` (), and ``meta`` (a JSON string: what it was
trained on, the split, validation metrics). ``train_heads.py`` rebuilds them deterministically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

HEADS_DIR = Path(__file__).resolve().parent / "heads"


class HeadMissingError(FileNotFoundError):
    """A head's weight file is absent; the message says how to rebuild it."""


@dataclass(frozen=True)
class LogisticHead:
    """``sigmoid(x · weight + bias)`` over L2-normalised embeddings."""

    name: str
    weight: np.ndarray
    bias: float
    meta: dict[str, Any]

    def predict(self, embeddings: np.ndarray) -> np.ndarray:
        """Probability of the positive class for each row."""
        logits = embeddings @ self.weight + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -40, 40)))

    def save(self, directory: Path = HEADS_DIR) -> Path:
        """Write ``<directory>/<name>.npz``."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.name}.npz"
        np.savez(
            path,
            weight=self.weight.astype(np.float32),
            bias=np.float32(self.bias),
            meta=np.array(json.dumps(self.meta, sort_keys=True)),
        )
        return path


@cache
def load_head(name: str, directory: Path = HEADS_DIR) -> LogisticHead:
    """Load a stored head (cached per process)."""
    path = directory / f"{name}.npz"
    if not path.is_file():
        raise HeadMissingError(
            f"{path}: head {name!r} not found; rebuild it with `python -m "
            "safactory.tools.audit_training.train_heads --data <shared/data/audit>` (text "
            "heads) or `... .audit_training.deep_heads --data <shared/data/audit>` (deep tier)"
        )
    with np.load(path, allow_pickle=False) as data:
        return LogisticHead(
            name,
            data["weight"].astype(np.float32),
            float(data["bias"]),
            json.loads(str(data["meta"])),
        )


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    l2: float = 1.0,
    iterations: int = 50,
    sample_weight: np.ndarray | None = None,
) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression by Newton's method (deterministic, exact).

    Classes are weighted to balance (within ``sample_weight``, e.g. equal weight per
    source, when given). Returns ``(weight, bias)``.
    """
    n, d = x.shape
    xb = np.hstack([x.astype(np.float64), np.ones((n, 1))])
    given = np.ones(n) if sample_weight is None else sample_weight * n / sample_weight.sum()
    pos = max(float((given * (y > 0)).sum()), 1e-9)
    neg = max(float((given * (y <= 0)).sum()), 1e-9)
    sample_w = given * np.where(y > 0, n / (2 * pos), n / (2 * neg))
    reg = np.full(d + 1, l2)
    reg[-1] = 0.0
    theta = np.zeros(d + 1)
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(xb @ theta, -40, 40)))
        grad = xb.T @ (sample_w * (p - y)) + reg * theta
        hess = (xb * (sample_w * p * (1 - p))[:, None]).T @ xb + np.diag(reg) + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        theta -= step
        if np.abs(step).max() < 1e-7:
            break
    return theta[:-1].astype(np.float32), float(theta[-1])
