"""Rebuild the model tier's text heads (instruction in data, jailbreak, toxicity).

    python -m safactory.tools.audit_training.train_heads --data ../shared/data/audit

Each head is an L2-regularised logistic regression fitted by Newton's method (no
randomness) on the model tier's own embedder (int8, 3 layers, 64 word pieces; recorded in
each head), trained on text sets only (no labelled trajectory source), and saved with its
validation metrics under ``streams/audit/heads/``. The deep tier's heads are rebuilt by
``deep_heads.py``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...streams.audit.embedding import MiniLM, audit_embedder
from ...streams.audit.heads import HEADS_DIR, LogisticHead, fit_logistic
from . import datasets as ds

CORPORA: dict[str, Callable[[Path], list[ds.Example]]] = {
    "instruction_in_data": ds.corpus_instruction_in_data,
    "jailbreak": ds.corpus_jailbreak,
    "toxicity": ds.corpus_toxicity,
}
L2 = 1.0


def metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Precision, recall, F1 and accuracy (percent) at threshold 0.5."""
    pred = p >= 0.5
    tp = float((pred & (y == 1)).sum())
    fp = float((pred & (y == 0)).sum())
    fn = float((~pred & (y == 1)).sum())
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": round(100 * precision, 1),
        "recall": round(100 * recall, 1),
        "f1": round(100 * f1, 1),
        "accuracy": round(100 * float((pred == (y == 1)).mean()), 1),
        "n": len(y),
    }


def train(name: str, data: Path, embedder: MiniLM, out_dir: Path) -> dict[str, object]:
    """Fit one head on its corpus's train split; save it with its validation metrics."""
    examples = sorted(CORPORA[name](data), key=lambda e: e[0])
    train_rows = [e for e in examples if ds.split_of(e[0]) == "train"]
    val_rows = [e for e in examples if ds.split_of(e[0]) == "val"]
    x_train = embedder.embed([t for _, t, _ in train_rows])
    y_train = np.array([y for *_, y in train_rows], dtype=np.float64)
    weight, bias = fit_logistic(x_train, y_train, l2=L2)
    head = LogisticHead(name, weight, bias, {})
    x_val = embedder.embed([t for _, t, _ in val_rows])
    y_val = np.array([y for *_, y in val_rows])
    meta = {
        "head": name,
        "train_n": len(train_rows),
        "val_n": len(val_rows),
        "train_positive": int(y_train.sum()),
        "l2": L2,
        "embedder": embedder.settings(),
        "train": metrics(y_train.astype(int), head.predict(x_train)),
        "val": metrics(y_val, head.predict(x_val)),
        "split": "sha256(key)[0] % 5 == 0 → val",
        "trajectory_sources": [],
    }
    LogisticHead(name, weight, bias, meta).save(out_dir)
    return meta


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the shared data/audit folder")
    parser.add_argument("--out", type=Path, default=HEADS_DIR, help="where the .npz heads go")
    parser.add_argument("--only", nargs="*", choices=sorted(CORPORA), help="heads to rebuild")
    args = parser.parse_args(argv)
    if not (args.data / "trajectories").is_dir():
        parser.error(f"--data {args.data}: no trajectories/ folder; pass shared/data/audit")
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    embedder = audit_embedder(cache_size=100_000)
    for name in args.only or sorted(CORPORA):
        print(json.dumps(train(name, args.data, embedder, args.out), sort_keys=True))


if __name__ == "__main__":
    main()
