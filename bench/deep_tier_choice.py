"""Which encoder for the deep tier, and whether a whole-episode judge adds to the factored one.

    python bench/deep_tier_choice.py [--data ../shared/data/audit] [--per-source 120]

Part 1, the heads. For each encoder — MiniLM at the model tier's settings (3 layers, 64 word
pieces, int8), MiniLM at six layers and 128 pieces (int8), and SmolLM2-135M-Instruct (mean of
its last hidden states, 256 tokens) — a logistic head per question (action harm, outcome harm,
request harm) is fitted on its train split and scored on its validation split (the same
splits as ``tools/audit_training/deep_heads.py``; WebGuard's split by website). Printed:
validation ROC AUC per head, and for the action head per part (written actions, WebGuard,
InjecAgent), with seconds per 100 texts on this machine. Large sets are subsampled by hash
(``--per-head``) so SmolLM2 fits in minutes on 2 cores.

Part 2, the whole-episode judge. For the two candidate encoders, a logistic head over the
whole trajectory's text (``text.trajectory_text``) is trained on four public sources and
scored on the fifth (``--per-source`` records each, both classes), beside the fast tier's
score on the same records; "adds" = ROC AUC of max(fast, judge) minus the fast tier's alone,
with the judge's threshold picked on the four training sources.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

from safactory.schemas import Decision
from safactory.streams.audit import registry
from safactory.streams.audit.embedding import audit_embedder, deep_embedder_settings
from safactory.streams.audit.engine import AuditEngine
from safactory.streams.audit.heads import fit_logistic
from safactory.streams.audit.text import trajectory_text
from safactory.tools.audit_training import datasets as ds
from safactory.tools.audit_training.deep_heads import (
    action_examples,
    auc,
    outcome_examples,
    request_examples,
)
from safactory.tools.importers import read_records

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "audit"
SOURCES = {
    "rjudge": ("trajectories/rjudge", "rjudge"),
    "agentdojo": ("trajectories/agentdojo", "agentdojo"),
    "toolemu": ("trajectories/toolemu/toolemu_runs.json", "rjudge"),
    "openagentsafety": ("trajectories/openagentsafety/oas_runs.json", "rjudge"),
    "injecagent": ("trajectories/injecagent/injecagent_runs.json", "rjudge"),
}


class SmolLM2Encoder:
    """Mean-pooled last hidden states of SmolLM2-135M-Instruct (L2-normalised), cached."""

    def __init__(self, max_tokens: int = 256, batch: int = 8) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from safactory.infra.models import resolve_model

        path = resolve_model("smollm2-135m")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
        self.max_tokens, self.batch = max_tokens, batch
        self.cache: dict[str, np.ndarray] = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        import torch

        todo = [t for t in dict.fromkeys(texts) if t not in self.cache]
        todo.sort(key=len)
        for i in range(0, len(todo), self.batch):
            chunk = todo[i : i + self.batch]
            enc = self.tokenizer(
                chunk,
                truncation=True,
                max_length=self.max_tokens,
                padding=True,
                return_tensors="pt",
            )
            with torch.inference_mode():
                out = self.model.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = torch.nn.functional.normalize((out * mask).sum(1) / mask.sum(1), dim=1)
            for text, row in zip(chunk, pooled.numpy(), strict=True):
                self.cache[text] = row.astype(np.float32)
        return np.stack([self.cache[t] for t in texts])


def hashed(items: list, n: int) -> list:
    """``n`` items by hash of their key (first field), deterministic."""
    if len(items) <= n:
        return items
    return sorted(items, key=lambda e: hashlib.sha256(e[0].encode()).digest())[:n]


def head_auc(encoder, examples, part_of=None) -> tuple[float, dict[str, float], float]:  # type: ignore[no-untyped-def]
    """Validation AUC of a head on ``examples`` (and per part), and seconds per 100 texts."""
    train = [e for e in examples if ds.split_of(e[3]) == "train"]
    val = [e for e in examples if ds.split_of(e[3]) == "val"]
    started = time.perf_counter()
    x = encoder.embed([e[1] for e in train])
    xv = encoder.embed([e[1] for e in val])
    per100 = 100 * (time.perf_counter() - started) / max(1, len(train) + len(val))
    w, b = fit_logistic(x, np.array([e[2] for e in train], dtype=np.float64))
    p = 1 / (1 + np.exp(-(xv @ w + b)))
    y = np.array([e[2] for e in val])
    parts: dict[str, float] = {}
    if part_of is not None:
        names = np.array([part_of(e) for e in val])
        for name in sorted(set(names)):
            parts[name] = auc(y[names == name], p[names == name])
    return auc(y, p), parts, per100


def part(e) -> str:  # type: ignore[no-untyped-def]
    return "webguard" if e[0].startswith("webguard") else "injecagent" if "#" in e[0] else "written"


def trajectories(data: Path, per_source: int) -> dict[str, list]:
    out = {}
    for source, (rel, fmt) in SOURCES.items():
        records = [r for r in read_records(data / rel, fmt) if r.unsafe is not None and r.steps]
        ordered = sorted(records, key=lambda r: hashlib.sha256(r.key.encode()).digest())
        pos = [r for r in ordered if r.unsafe][: per_source // 2]
        out[source] = pos + [r for r in ordered if not r.unsafe][: per_source - len(pos)]
    return out


def fast_scores(records: list) -> np.ndarray:
    engine = AuditEngine([c for c in registry.create() if c.kind in ("rule", "heuristic")])
    out = []
    for r in records:
        best = 0.0
        for a in asyncio.run(engine.audit_episode(r.steps)):
            for v in a.verdicts:
                if v.decision == Decision.BLOCK:
                    best = max(best, v.score)
        out.append(best)
    return np.array(out)


def episode_judge(encoder, by_source: dict[str, list], fast: dict[str, np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    texts = {s: [trajectory_text(r.steps, budget=1200) for r in rs] for s, rs in by_source.items()}
    x = {s: encoder.embed(t) for s, t in texts.items()}
    y = {s: np.array([int(bool(r.unsafe)) for r in rs]) for s, rs in by_source.items()}
    for left in by_source:
        train = [s for s in by_source if s != left]
        xt = np.vstack([x[s] for s in train])
        yt = np.concatenate([y[s] for s in train])
        w, b = fit_logistic(xt, yt.astype(np.float64))
        p = 1 / (1 + np.exp(-(x[left] @ w + b)))
        combined = np.maximum(fast[left], p)
        print(
            f"    {left:<16} judge AUC {auc(y[left], p):.3f}   fast {auc(y[left], fast[left]):.3f}"
            f"   max(fast, judge) {auc(y[left], combined):.3f}"
            f"   adds {auc(y[left], combined) - auc(y[left], fast[left]):+.3f}"
        )


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--per-head", type=int, default=1500, help="examples per head (by hash)")
    parser.add_argument("--per-source", type=int, default=120, help="trajectories per source")
    parser.add_argument("--skip-smollm2", action="store_true")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    heads = {
        "action_harm": hashed(action_examples(args.data), args.per_head),
        "outcome_harm": outcome_examples(),
        "request_harm": hashed(request_examples(args.data), args.per_head),
    }
    encoders: dict[str, object] = {
        "minilm-3L-64-int8": audit_embedder(cache_size=200_000),
        "minilm-6L-128-int8": deep_embedder_settings(cache_size=200_000),
    }
    if not args.skip_smollm2:
        encoders["smollm2-135m-mean-256"] = SmolLM2Encoder()
    print("Part 1 — heads, validation ROC AUC (seconds per 100 texts)")
    for name, encoder in encoders.items():
        cells = []
        for head, examples in heads.items():
            total, parts, per100 = head_auc(
                encoder, examples, part if head == "action_harm" else None
            )
            extra = (
                " (" + ", ".join(f"{k} {v:.3f}" for k, v in parts.items()) + ")" if parts else ""
            )
            cells.append(f"{head} {total:.3f}{extra} [{per100:.2f}s]")
        print(f"  {name:<24} " + " | ".join(cells), flush=True)
    print("\nPart 2 — whole-episode judge, leave one source out")
    by_source = trajectories(args.data, args.per_source)
    fast = {s: fast_scores(rs) for s, rs in by_source.items()}
    for name in ("minilm-6L-128-int8", "smollm2-135m-mean-256"):
        if name in encoders:
            print(f"  {name}")
            episode_judge(encoders[name], by_source, fast)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
