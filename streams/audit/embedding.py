"""The model tier's embedder: the project's one MiniLM (:mod:`safactory.infra.embedding`)
at the audit settings.

For speed on one core the encoder's linear layers run in int8 (``quantised.Int8Linear``):
weights quantised per output channel once at load, activations per token at run time.
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

from typing import TYPE_CHECKING

from ...infra.embedding import DIM, MiniLM

if TYPE_CHECKING:
    import torch

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


def _int8(encoder: torch.nn.Module) -> None:
    from .quantised import quantise_linears  # torch loads with the model, not on import

    quantise_linears(encoder)


def audit_embedder(*, quantised: bool = True, cache_size: int = 32_768) -> MiniLM:
    """MiniLM at the audit settings (``quantised=False``: the float32 encoder, to compare)."""
    return MiniLM(
        max_tokens=MAX_TOKENS,
        layers=LAYERS,
        quantise=_int8 if quantised else None,
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
        quantise=_int8 if quantised else None,
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
