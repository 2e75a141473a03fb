"""Rebuild the deep tier's heads (action harm, outcome harm, request harm), deterministically.

    python -m safactory.tools.audit_training.deep_heads --data ../shared/data/audit

Each head is an L2-regularised logistic regression (Newton's method, no randomness) on the
deep embedder's vectors of the texts its checker reads (``describe_call``,
``describe_outcome``, the request). Its threshold is chosen on the head's
own validation split (one example in five by hash; WebGuard's by website, so validation
sites are unseen): the lowest cut whose precision there reaches 90 %, never picked on a
trajectory source. Each head records what it trained on: ``trajectory_sources`` lists the
labelled sources whose acts it read (InjecAgent, whose runs label the attacker's call by
construction, and the own environments, labelled by their ground truth; see
``bench/own_episodes.py --actions``), so ``bench/audit_generalization.py`` scores each of
them with heads trained without it. The other cases are texts and single acts: the written
ones, WebGuard's, and PrivacyLens's disclosures with their harmless twins.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ...streams.audit.checkers.deep import describe_call, describe_outcome
from ...streams.audit.embedding import MiniLM, deep_embedder_settings
from ...streams.audit.heads import HEADS_DIR, LogisticHead, fit_logistic
from . import datasets as ds

L2 = 1.0
HEADS = ("action_harm", "outcome_harm", "request_harm")
OWN_ENVS = "own-envs"
"""The own environments' source name (``calibrate.OWN``): their acts train two heads."""


def action_examples(data: Path, exclude: Iterable[str] = ()) -> list[tuple[str, str, int, str]]:
    """(key, text, label, split group) for the action head: the written actions, WebGuard's
    web actions (grouped by website), PrivacyLens's disclosures and their harmless twins, and
    the labelled calls of InjecAgent and of the own environments (unless excluded)."""
    excluded = set(exclude)
    out = [
        (key, describe_call(tool, args, desc), y, key)
        for key, tool, args, desc, y in ds.own_actions()
    ]
    out += [
        (key, describe_call(tool, args, desc), y, f"webguard-site:{site}")
        for key, tool, args, desc, y, site in ds.webguard_actions(data)
    ]
    out += [
        (key, describe_call(tool, args, desc), y, f"privacylens:{case}")
        for key, tool, args, desc, y, case in ds.privacylens_actions(data)
    ]
    if OWN_ENVS not in excluded:
        out += [(key, describe_call(t, a, d), y, key) for key, t, a, d, y in ds.env_actions()]
    if "injecagent" not in excluded:
        out += [
            (key, describe_call(tool, args, desc), y, key.split("#")[0])
            for key, tool, args, desc, y in ds.injecagent_actions(data)
        ]
    return out


def outcome_examples(exclude: Iterable[str] = ()) -> list[tuple[str, str, int, str]]:
    """(key, text, label, group) for the outcome head: the written outcomes and what the own
    environments reported back (unless excluded)."""
    rows = [(k, call, obs, y) for k, call, obs, y in ds.own_outcomes()]
    if OWN_ENVS not in set(exclude):
        rows += ds.env_outcomes()
    return [(k, describe_outcome(call, obs), y, k) for k, call, obs, y in rows]


def request_examples(data: Path) -> list[tuple[str, str, int, str]]:
    """(key, text, label, group) for the request head (twins share a split group)."""
    rows = {r["id"]: r for r in ds.own_rows("requests")}
    out = []
    for key, text, y in ds.corpus_request_harm(data):
        group = key
        own = rows.get(key.removeprefix("own-request:"))
        if own is not None and own.get("twin"):
            group = "twins:" + "|".join(sorted([own["id"], own["twin"]]))
        out.append((key, text[:2000], y, group))
    return out


TARGET_PRECISION = 0.9
"""A deep-tier block must be right nine times in ten on the head's own validation split."""


def best_threshold(y: np.ndarray, p: np.ndarray) -> float:
    """The lowest probability cut (at least 0.5) whose validation precision reaches
    :data:`TARGET_PRECISION`; where none does, the cut that maximises F1."""
    cuts = np.unique(np.clip(p, 0.5, 0.99))
    for t in cuts:
        pred = p >= t
        tp = float((pred & (y == 1)).sum())
        fp = float((pred & (y == 0)).sum())
        if tp and tp / (tp + fp) >= TARGET_PRECISION:
            return float(t)
    best, cut = -1.0, 0.5
    for t in cuts:
        pred = p >= t
        tp = float((pred & (y == 1)).sum())
        fp = float((pred & (y == 0)).sum())
        fn = float((~pred & (y == 1)).sum())
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        if f1 > best:
            best, cut = f1, float(t)
    return cut


def auc(y: np.ndarray, p: np.ndarray) -> float:
    """ROC AUC (ties count half)."""
    pos, neg = p[y == 1], p[y == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def fit(
    name: str,
    examples: Sequence[tuple[str, str, int, str]],
    embed: MiniLM,
    sources: Sequence[str],
) -> LogisticHead:
    """Fit one head on the train split of ``examples``; record its validation figures and
    threshold in its ``meta``."""
    rows = sorted(examples, key=lambda e: e[0])
    train = [e for e in rows if ds.split_of(e[3]) == "train"]
    val = [e for e in rows if ds.split_of(e[3]) == "val"]
    x = embed.embed([t for _, t, _, _ in train])
    y = np.array([e[2] for e in train], dtype=np.float64)
    weight, bias = fit_logistic(x, y, l2=L2)
    head = LogisticHead(name, weight, bias, {})
    pv = head.predict(embed.embed([t for _, t, _, _ in val]))
    yv = np.array([e[2] for e in val])
    threshold = best_threshold(yv, pv)
    pred = pv >= threshold
    tp, fp = int((pred & (yv == 1)).sum()), int((pred & (yv == 0)).sum())
    fn = int((~pred & (yv == 1)).sum())
    meta = {
        "head": name,
        "train_n": len(train),
        "val_n": len(val),
        "train_positive": int(y.sum()),
        "l2": L2,
        "embedder": embed.settings(),
        "threshold": round(threshold, 4),
        "val": {
            "auc": round(auc(yv, pv), 4),
            "precision": round(100 * tp / (tp + fp), 1) if tp + fp else 0.0,
            "recall": round(100 * tp / (tp + fn), 1) if tp + fn else 0.0,
            "n": len(val),
        },
        "split": "sha256(group)[0] % 5 == 0 → val",
        "sources": list(sources),
        "data_digest": hashlib.sha256(
            json.dumps([(k, y) for k, _, y, _ in rows]).encode()
        ).hexdigest()[:16],
    }
    return LogisticHead(name, weight, bias, meta)


def train_all(
    data: Path, embed: MiniLM, exclude: Iterable[str] = (), only: Iterable[str] = HEADS
) -> dict[str, LogisticHead]:
    """The deep heads trained without the trajectory sources in ``exclude``."""
    excluded = set(exclude)
    out: dict[str, LogisticHead] = {}
    chosen = set(only)
    envs = [] if OWN_ENVS in excluded else [OWN_ENVS]
    if "action_harm" in chosen:
        used = [s for s in ("injecagent", OWN_ENVS) if s not in excluded]
        written = ["written actions", "webguard", "privacylens", *used]
        out["action_harm"] = fit("action_harm", action_examples(data, excluded), embed, written)
        out["action_harm"].meta["trajectory_sources"] = used
    if "outcome_harm" in chosen:
        examples = outcome_examples(excluded)
        out["outcome_harm"] = fit("outcome_harm", examples, embed, ["written outcomes", *envs])
        out["outcome_harm"].meta["trajectory_sources"] = envs
    if "request_harm" in chosen:
        texts = ["written requests", "jailbreakbench goals", "toolsword", "cyberseceval frr"]
        out["request_harm"] = fit("request_harm", request_examples(data), embed, texts)
        out["request_harm"].meta["trajectory_sources"] = []
    return out


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="the shared data/audit folder")
    parser.add_argument("--out", type=Path, default=HEADS_DIR, help="where the .npz heads go")
    parser.add_argument("--only", nargs="*", choices=HEADS, help="heads to rebuild")
    args = parser.parse_args(argv)
    if not (args.data / "trajectories").is_dir():
        parser.error(f"--data {args.data}: no trajectories/ folder; pass shared/data/audit")
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    embed = deep_embedder_settings(cache_size=200_000)
    for head in train_all(args.data, embed, only=args.only or HEADS).values():
        head.save(args.out)
        print(json.dumps(head.meta, sort_keys=True))


if __name__ == "__main__":
    main()
