"""JSON-schema-constrained decoding for Hugging Face ``generate``: the schema compiled once
against the tokenizer, then a fresh logits processor per generation that masks every token
the schema does not allow next, so greedy decoding writes JSON valid under the schema
(compact separators) and then EOS. The library is llguidance, chosen by measurement against
xgrammar, outlines-core and lm-format-enforcer (docs/DECISIONS.md, bench/planner_grammar.py).

The model's vocabulary (its logits' width) may differ from the tokenizer's: masks are built
for the tokenizer and applied to whatever width the logits have, logits past the mask being
disallowed. Special tokens other than EOS are never allowed (a grammar may let
``<|im_start|>`` into a JSON string as its literal text, which decoding drops).

Why here, in ``infra/``: the DataElf planner (``sinks/``) and any model server of ours
constrain output the same way, and the components may not import one another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

Factory = Callable[[], LogitsProcessor]
"""Gives a fresh logits processor for one generation (batch size 1)."""
_BITS = torch.arange(32, dtype=torch.int32)


def vocab_size(tokenizer: PreTrainedTokenizerBase) -> int:
    """Token ids the tokenizer can produce: one past the highest id."""
    return max(len(tokenizer), max(tokenizer.get_vocab().values()) + 1)


def banned_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The special tokens other than EOS."""
    specials = (i for i, t in tokenizer.added_tokens_decoder.items() if t.special)
    return sorted(i for i in specials if i != tokenizer.eos_token_id)


def apply_bitmask(scores: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """``scores`` with -inf where ``bitmask`` (int32 words, bit ``i % 32`` of word ``i // 32``
    for token ``i``) holds 0, and past its end."""
    allowed = ((bitmask.view(1, -1, 1) >> _BITS) & 1).bool().view(1, -1)
    width = scores.shape[-1]
    if allowed.shape[-1] < width:
        allowed = torch.nn.functional.pad(allowed, (0, width - allowed.shape[-1]))
    return scores.masked_fill(~allowed[:, :width], float("-inf"))


class Constrained(LogitsProcessor):
    """One generation of batch size 1: the last sampled token goes to the grammar, then the
    scores are masked to what the grammar allows next, less the ``banned`` tokens. A
    subclass gives ``_consume`` and ``_mask``."""

    def __init__(self, banned: list[int]) -> None:
        self._started = False
        self._banned = torch.tensor(banned, dtype=torch.long)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        if input_ids.shape[0] != 1:
            raise ValueError(f"batch size 1 only, got {input_ids.shape[0]}")
        if self._started:
            self._consume(int(input_ids[0, -1]))
        self._started = True
        scores = self._mask(input_ids, scores)
        scores[:, self._banned[self._banned < scores.shape[-1]]] = float("-inf")
        return scores

    def masked(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` masked to what the grammar allows next (for :func:`greedy`)."""
        scores = self._mask(torch.empty(0), scores)
        scores[:, self._banned[self._banned < scores.shape[-1]]] = float("-inf")
        return scores

    def consume(self, token: int) -> None:
        """The grammar takes ``token`` (for :func:`greedy`)."""
        self._consume(token)

    def forced(self) -> list[int]:
        """Tokens the grammar allows one way only from here, already taken (none unless the
        library can say)."""
        return []

    def _consume(self, token: int) -> None:
        raise NotImplementedError

    def _mask(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class Bitmasked(Constrained):
    """A grammar matcher that writes the allowed tokens into an int32 bitmask (``fill``)
    and takes each sampled token (``accept``)."""

    def __init__(
        self,
        matcher: Any,
        words: int,
        banned: list[int],
        accept: Callable[[Any, int], object],
        fill: Callable[[Any, torch.Tensor], None],
        forced: Callable[[Any], list[int]] | None = None,
    ) -> None:
        super().__init__(banned)
        self._matcher = matcher
        self._bitmask = torch.full((1, words), -1, dtype=torch.int32)
        self._accept = accept
        self._fill = fill
        self._forced = forced

    def forced(self) -> list[int]:
        if self._forced is None:
            return []
        tokens = list(self._forced(self._matcher))
        for token in tokens:
            self._consume(token)
        return tokens

    def _consume(self, token: int) -> None:
        if self._accept(self._matcher, token) is False:
            raise RuntimeError(f"grammar rejected token {token}")

    def _mask(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self._fill(self._matcher, self._bitmask)
        return apply_bitmask(scores, self._bitmask)


_WRAPPED: dict[int, tuple[PreTrainedTokenizerBase, Any]] = {}
"""llguidance's view of each tokenizer, built once (it walks the whole vocabulary)."""


def _wrapped(tokenizer: PreTrainedTokenizerBase) -> Any:
    import llguidance.hf

    kept = _WRAPPED.get(id(tokenizer))
    if kept is None or kept[0] is not tokenizer:
        n = vocab_size(tokenizer)
        wrapped = llguidance.hf.from_tokenizer(
            tokenizer, n_vocab=n, eos_token=tokenizer.eos_token_id
        )
        kept = _WRAPPED[id(tokenizer)] = (tokenizer, wrapped)
    return kept[1]


def json_schema(tokenizer: PreTrainedTokenizerBase, schema: dict[str, Any]) -> Factory:
    """Compile ``schema`` for ``tokenizer`` (llguidance: the tokenizer wrapped once, the
    grammar checked, a keyword it does not enforce an error); the result gives a fresh
    processor per generation (an ``LLMatcher``, which builds its lexer lazily)."""
    import llguidance

    n = vocab_size(tokenizer)
    lltok = _wrapped(tokenizer)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": False}
    )
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, lltok)
    if failed or messages:
        raise ValueError(f"llguidance: {'; '.join(messages)}")
    words, banned = (n + 31) // 32, banned_ids(tokenizer)

    def fill(matcher: Any, bitmask: torch.Tensor) -> None:
        matcher.unsafe_compute_mask_ptr(bitmask.data_ptr(), bitmask.numel() * 4)
        if matcher.is_error():
            raise RuntimeError(f"llguidance: {matcher.get_error()}")

    def make() -> LogitsProcessor:
        matcher = llguidance.LLMatcher(lltok, grammar)
        return Bitmasked(
            matcher,
            words,
            banned,
            llguidance.LLMatcher.consume_token,
            fill,
            llguidance.LLMatcher.compute_ff_tokens,
        )

    return make


def greedy(
    model: Any, prompt: list[int], constrained: Constrained, max_new_tokens: int, eos: int
) -> list[int]:
    """Greedy decoding of batch size 1 under ``constrained``, with the tokens the grammar
    forces (keys, punctuation, the rest of a name) fed in one forward pass rather than one
    pass each: the same answer as ``generate`` with the processor, in fewer passes."""
    from transformers import DynamicCache

    cache = DynamicCache()
    feed = prompt
    out: list[int] = []
    with torch.inference_mode():
        while len(out) < max_new_tokens:
            logits = model(torch.tensor([feed]), past_key_values=cache, use_cache=True).logits
            token = int(constrained.masked(logits[:, -1, :].float()).argmax(-1))
            out.append(token)
            if token == eos:
                break
            constrained.consume(token)
            forced = constrained.forced()[: max(0, max_new_tokens - len(out))]
            out += forced
            feed = [token, *forced]
    return out
