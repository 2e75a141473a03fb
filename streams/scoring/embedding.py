"""Sentence embeddings for the data-value, skill and poisoning logic in ``streams/``: the
project's one MiniLM (:mod:`safactory.infra.embedding`) at its full settings."""

from __future__ import annotations

from ...infra.embedding import MiniLM, TextEmbedder

__all__ = ["MiniLM", "TextEmbedder"]
