"""Rebuild the whole-episode judge's head from the five public trajectory sources.

    python -m safactory.tools.audit_training.episode_judge --data ../shared/data/audit

The judge reads an episode's text (``text.trajectory_text``) through SmolLM2-135M's mean
hidden state; its head is an L2-regularised logistic regression (Newton's method), every
source weighted equally (the sources differ twenty-fold in size). Its threshold is picked out
of fold: for each source, a head fitted on the other four scores it, and the pooled
out-of-fold probabilities give the lowest cut with 90 % precision; no source's own
predictions choose its threshold. A source gives at most ``--max-per-source`` records (1,000:
about 5,000 episodes in all, some 25 minutes of encoding on 2 cores), and vectors are
cached by text under ``$SF_HOME/bench`` (:class:`FeatureCache`), shared with
``bench/audit_generalization.py``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ...streams.audit.checkers.deep import EpisodeJudge
from ...streams.audit.embedding import SmolLM2Embedder
from ...streams.audit.heads import HEADS_DIR, LogisticHead, fit_logistic
from ...streams.audit.text import trajectory_text
from ..importers import AuditRecord, read_records
from .deep_heads import TARGET_PRECISION, auc

SOURCES: dict[str, tuple[str, str]] = {
    "rjudge": ("trajectories/rjudge", "rjudge"),
    "agentdojo": ("trajectories/agentdojo", "agentdojo"),
    "toolemu": ("trajectories/toolemu/toolemu_runs.json", "rjudge"),
    "openagentsafety": ("trajectories/openagentsafety/oas_runs.json", "rjudge"),
    "injecagent": ("trajectories/injecagent/injecagent_runs.json", "rjudge"),
}
L2 = 1.0


class FeatureCache:
    """Judge vectors by text, kept on disk between runs (one file per encoder setting)."""

    def __init__(self, embedder: SmolLM2Embedder, home: Path | None = None) -> None:
        home = home or Path(os.environ.get("SF_HOME", Path.home() / ".cache" / "safactory"))
        tag = hashlib.sha256(json.dumps(embedder.settings(), sort_keys=True).encode()).hexdigest()
        self.path = home / "bench" / f"judge-features-{tag[:12]}.npz"
        self.embedder = embedder
        self.vectors: dict[str, np.ndarray] = {}
        if self.path.is_file():
            with np.load(self.path) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))

    @property
    def dim(self) -> int:
        return self.embedder.dim

    def settings(self) -> dict[str, object]:
        """The encoder's settings (the cache stands in for it)."""
        return self.embedder.settings()

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def embed(self, texts: Sequence[str], progress: str = "") -> np.ndarray:
        """Vectors of ``texts``, encoding (and saving) the missing ones in chunks."""
        missing = list(dict.fromkeys(t for t in texts if self.key(t) not in self.vectors))
        for start in range(0, len(missing), 256):
            chunk = missing[start : start + 256]
            for text, vector in zip(chunk, self.embedder.embed(chunk), strict=True):
                self.vectors[self.key(text)] = vector
            self.save()
            if progress:
                done = min(start + 256, len(missing))
                print(f"\r  {progress}: {done}/{len(missing)} encoded", end="", file=sys.stderr)
        if missing and progress:
            print(file=sys.stderr)
        if not texts:
            return np.zeros((0, self.embedder.dim), dtype=np.float32)
        return np.stack([self.vectors[self.key(t)] for t in texts])

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        keys = list(self.vectors)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.vectors[k] for k in keys]))
        tmp.replace(self.path)


def episode_text(record: AuditRecord) -> str:
    """What the judge reads of a recorded episode."""
    return trajectory_text(record.steps, budget=EpisodeJudge.budget)


MAX_PER_SOURCE = 1000
"""Records a source contributes at most (the sources weigh the same whatever their size, and
InjecAgent's 5,419 runs are a few hundred attack templates times a few cases)."""


def load(
    data: Path, sources: Iterable[str] = SOURCES, max_per_source: int = MAX_PER_SOURCE
) -> dict[str, list[AuditRecord]]:
    """The labelled records of the public sources; of a larger source, the ``max_per_source``
    whose keys hash lowest (the same sample on every machine; 0 = all)."""
    out = {}
    for source in sources:
        rel, fmt = SOURCES[source]
        rows = [r for r in read_records(data / rel, fmt) if r.unsafe is not None and r.steps]
        if max_per_source and len(rows) > max_per_source:
            rows = sorted(rows, key=lambda r: hashlib.sha256(r.key.encode()).hexdigest())
            rows = rows[:max_per_source]
        out[source] = rows
    return out


def _fit(x: list[np.ndarray], y: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """One head over several sources, each source weighing the same in all."""
    weights = np.concatenate([np.full(len(a), 1.0 / len(a)) for a in y])
    return fit_logistic(
        np.vstack(x), np.concatenate(y).astype(np.float64), l2=L2, sample_weight=weights
    )


def threshold_out_of_fold(features: dict[str, np.ndarray], labels: dict[str, np.ndarray]) -> float:
    """The lowest cut whose pooled out-of-fold precision reaches 90 % (each source scored by
    a head fitted without it)."""
    probs, ys = [], []
    for held in features:
        others = [s for s in features if s != held]
        w, b = _fit([features[s] for s in others], [labels[s] for s in others])
        probs.append(1 / (1 + np.exp(-(features[held] @ w + b))))
        ys.append(labels[held])
    p, y = np.concatenate(probs), np.concatenate(ys)
    for t in np.unique(np.clip(p, 0.5, 0.995)):
        pred = p >= t
        if pred.sum() and (pred & (y == 1)).sum() / pred.sum() >= TARGET_PRECISION:
            return float(t)
    return 0.995


def train(
    records: dict[str, list[AuditRecord]], cache: FeatureCache, name: str = "episode_judge"
) -> LogisticHead:
    """The judge's head on ``records`` (source → records), threshold out of fold."""
    features = {s: cache.embed([episode_text(r) for r in rs], s) for s, rs in records.items()}
    labels = {s: np.array([int(bool(r.unsafe)) for r in rs]) for s, rs in records.items()}
    w, b = _fit(list(features.values()), list(labels.values()))
    threshold = threshold_out_of_fold(features, labels) if len(features) > 2 else 0.5
    head = LogisticHead(name, w, b, {})
    fit_auc = {s: round(auc(labels[s], head.predict(features[s])), 4) for s in features}
    meta = {
        "head": name,
        "embedder": cache.embedder.settings(),
        "trajectory_sources": sorted(records),
        "n": {s: len(rs) for s, rs in records.items()},
        "threshold": round(threshold, 4),
        "threshold_rule": "pooled out-of-fold precision >= 0.9",
        "train_auc": fit_auc,
        "l2": L2,
    }
    return LogisticHead(name, w, b, meta)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the shared data/audit folder")
    parser.add_argument("--out", type=Path, default=HEADS_DIR, help="where the .npz head goes")
    parser.add_argument(
        "--max-per-source",
        type=int,
        default=MAX_PER_SOURCE,
        help="records a source contributes at most (0 = all)",
    )
    args = parser.parse_args(argv)
    if not (args.data / "trajectories").is_dir():
        parser.error(f"--data {args.data}: no trajectories/ folder; pass shared/data/audit")
    import torch

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    cache = FeatureCache(SmolLM2Embedder())
    head = train(load(args.data, max_per_source=args.max_per_source), cache)
    head.save(args.out)
    print(json.dumps(head.meta, sort_keys=True))


if __name__ == "__main__":
    main()
