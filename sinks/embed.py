"""Text embeddings for vector search: the project's one MiniLM (:mod:`safactory.infra.embedding`)
at its full settings, so the vectors stored are the model's own and ``query --like`` embeds
its text the same way. The names are the sink's: ``Embedder`` (what a sink needs) and
``MiniLMEmbedder`` (the one it uses)."""

from __future__ import annotations

from ..infra.embedding import MiniLM as MiniLMEmbedder
from ..infra.embedding import TextEmbedder as Embedder

__all__ = ["Embedder", "MiniLMEmbedder"]
