"""JSON-schema-constrained decoding for Hugging Face ``generate``: the schema compiled once
against the tokenizer (xgrammar: chosen by measurement, docs/DECISIONS.md), then a fresh
logits processor per generation that masks every token the schema does not allow next, so
greedy decoding writes JSON valid under the schema (compact separators) and then EOS.

Why here, in ``infra/``: the DataElf planner (``sinks/``) and any model server of ours
constrain output the same way, and the components may not import one another.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

Constrained = Callable[[], LogitsProcessor]
"""Gives a fresh logits processor for one generation (batch size 1)."""
_BITS = torch.arange(32, dtype=torch.int32)


def vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """Token ids the tokenizer can produce: one past the highest id."""
    return max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)


def apply_bitmask(scores: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """``scores`` with -inf where ``bitmask`` (int32 words, bit ``i % 32`` of word ``i // 32``
    for token ``i``) holds 0, and past its end (a model's vocabulary may be wider than its
    tokenizer's)."""
    allowed = ((bitmask.view(1, -1, 1) >> _BITS) & 1).bool().view(1, -1)
    width = scores.shape[-1]
    if allowed.shape[-1] < width:
        allowed = torch.nn.functional.pad(allowed, (0, width - allowed.shape[-1]))
    return scores.masked_fill(~allowed[:, :width], float("-inf"))


class Bitmasked(LogitsProcessor):
    """One generation of batch size 1 under a grammar matcher: the last sampled token goes
    to the matcher (``accept``), then the scores are masked to what it allows next
    (``fill`` writes an int32 bitmask)."""

    def __init__(
        self,
        matcher: Any,
        words: int,
        accept: Callable[[Any, int], object],
        fill: Callable[[Any, torch.Tensor], None],
    ) -> None:
        self._matcher = matcher
        self._bitmask = torch.full((1, words), -1, dtype=torch.int32)
        self._accept = accept
        self._fill = fill
        self._started = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        if input_ids.shape[0] != 1:
            raise ValueError(f"batch size 1 only, got {input_ids.shape[0]}")
        if self._started and self._accept(self._matcher, int(input_ids[0, -1])) is False:
            raise RuntimeError(f"the grammar rejected token {int(input_ids[0, -1])}")
        self._started = True
        self._fill(self._matcher, self._bitmask)
        return apply_bitmask(scores, self._bitmask)


def json_schema(tokenizer: PreTrainedTokenizerBase, schema: dict[str, Any]) -> Constrained:
    """Compile ``schema`` for ``tokenizer`` (once); the result gives a fresh processor per
    generation."""
    import xgrammar as xgr

    n = vocab_size(tokenizer)
    info = xgr.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=n, stop_token_ids=[tokenizer.eos_token_id]
    )
    compiler = xgr.GrammarCompiler(info, max_threads=torch.get_num_threads())
    compiled = compiler.compile_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")
    )
    words = (n + 31) // 32

    def fill(matcher: Any, bitmask: torch.Tensor) -> None:
        matcher.fill_next_token_bitmask(bitmask)

    def make() -> LogitsProcessor:
        return Bitmasked(xgr.GrammarMatcher(compiled), words, xgr.GrammarMatcher.accept_token, fill)

    return make
