"""Grammar-constrained decoding behind one interface, for four PyPI libraries.

``BACKENDS[name](tokenizer, schema)`` does the one-off work (tokenizer preprocessing, schema
compilation) and returns a factory; each call of the factory gives a fresh
``transformers.LogitsProcessor`` for one greedy ``model.generate`` of batch size 1, whose text
is JSON valid under ``schema`` (compact separators) followed by the tokenizer's EOS. Each
library is imported inside its adapter, so this module imports without any of them;
llguidance's adapter is the product's own (:mod:`safactory.infra.grammar`), and so are the
bitmask processor and the special-token ban the others share.

The model's vocabulary (its logits' width) may differ from the tokenizer's: masks are built
for the tokenizer and applied to whatever width the logits have, logits past the mask being
disallowed. Special tokens other than EOS are never allowed: xgrammar and lm-format-enforcer
would otherwise let ``<|im_start|>`` or ``<repo_name>`` into a JSON string as their literal
text, which decoding drops.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

from safactory.infra.grammar import (
    Bitmasked,
    Constrained,
    Factory,
    banned_ids,
    json_schema,
    vocab_size,
)


def xgrammar_backend(tokenizer: PreTrainedTokenizerBase, schema: dict) -> Factory:
    """xgrammar: the schema compiled once against the tokenizer; a ``GrammarMatcher`` per
    generation."""
    import xgrammar as xgr

    n = vocab_size(tokenizer)
    info = xgr.TokenizerInfo.from_huggingface(
        tokenizer, vocab_size=n, stop_token_ids=[tokenizer.eos_token_id]
    )
    compiled = xgr.GrammarCompiler(info, max_threads=torch.get_num_threads()).compile_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")
    )
    words, banned = (n + 31) // 32, banned_ids(tokenizer)

    def fill(matcher: Any, bitmask: torch.Tensor) -> None:
        matcher.fill_next_token_bitmask(bitmask)

    def make() -> LogitsProcessor:
        return Bitmasked(
            xgr.GrammarMatcher(compiled), words, banned, xgr.GrammarMatcher.accept_token, fill
        )

    return make


def _byte_vocabulary(tokenizer: PreTrainedTokenizerBase) -> dict[bytes, list[int]]:
    """Each token's bytes (GPT-2 byte-level BPE), special tokens and EOS left out (outlines-core
    takes EOS apart, and would read a special token as its literal text)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    if "ByteLevel" not in tokenizer.backend_tokenizer.to_str():
        raise NotImplementedError("outlines adapter: byte-level BPE tokenizers only")
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    special = {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    added = {i: t.content for i, t in tokenizer.added_tokens_decoder.items()}
    vocabulary: dict[bytes, list[int]] = {}
    for token, i in tokenizer.get_vocab().items():
        if i in special or i == tokenizer.eos_token_id:
            continue
        raw = added[i].encode() if i in added else bytes(byte_of[c] for c in token)
        vocabulary.setdefault(raw, []).append(i)
    return vocabulary


def outlines_backend(tokenizer: PreTrainedTokenizerBase, schema: dict) -> Factory:
    """outlines-core: the schema turned into one regex, and the regex into a token-level DFA
    index over the tokenizer's bytes, once; a ``Guide`` walking it per generation."""
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    regex = build_regex_from_schema(json.dumps(schema), whitespace_pattern="")
    index = Index(regex, Vocabulary(tokenizer.eos_token_id, _byte_vocabulary(tokenizer)))
    words, banned = (vocab_size(tokenizer) + 31) // 32, banned_ids(tokenizer)

    def accept(guide: Any, token: int) -> None:
        guide.advance(token, return_tokens=False)

    def fill(guide: Any, bitmask: torch.Tensor) -> None:
        guide.write_mask_into(bitmask.data_ptr(), bitmask.numel(), 4)

    def make() -> LogitsProcessor:
        return Bitmasked(Guide(index), words, banned, accept, fill)

    return make


class _Enforced(Constrained):
    """lm-format-enforcer's ``TokenEnforcer``, which keys its state on the whole sequence."""

    def __init__(self, enforcer: Any, banned: list[int]) -> None:
        super().__init__(banned)
        self._enforcer = enforcer

    def _consume(self, token: int) -> None:
        """The enforcer reads the sampled token from the sequence itself."""

    def _mask(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        allowed = self._enforcer.get_allowed_tokens(input_ids[0].tolist()).allowed_tokens
        ids = torch.tensor(allowed, dtype=torch.long)
        keep = torch.zeros(scores.shape[-1], dtype=torch.bool)
        keep[ids[ids < scores.shape[-1]]] = True
        return scores.masked_fill(~keep, float("-inf"))


def lmfe_backend(tokenizer: PreTrainedTokenizerBase, schema: dict) -> Factory:
    """lm-format-enforcer: the tokenizer's prefix tree built once; a character-level JSON
    schema parser and a ``TokenEnforcer`` per generation.

    Its ``integrations.transformers`` module imports ``transformers.tokenization_utils``,
    gone in transformers 5, so its tokenizer data is built here the same way."""
    from lmformatenforcer import JsonSchemaParser, TokenEnforcer, TokenEnforcerTokenizerData

    n = vocab_size(tokenizer)
    special = set(tokenizer.all_special_ids)
    zero = tokenizer.encode("0", add_special_tokens=False)[-1]
    regular = []
    for i in range(n):
        if i in special:
            continue
        after_zero = tokenizer.decode([zero, i])[1:]
        regular.append((i, after_zero, len(after_zero) > len(tokenizer.decode([i]))))

    def decode(tokens: list[int]) -> str:
        return tokenizer.decode(tokens).rstrip("\ufffd")

    data = TokenEnforcerTokenizerData(regular, decode, tokenizer.eos_token_id, False, n)
    banned = banned_ids(tokenizer)

    def make() -> LogitsProcessor:
        parser = JsonSchemaParser(schema)
        enforcer = TokenEnforcer(data, parser)
        parser.config.max_consecutive_whitespaces = 0
        return _Enforced(enforcer, banned)

    return make


BACKENDS: dict[str, Callable[[PreTrainedTokenizerBase, dict], Factory]] = {
    "xgrammar": xgrammar_backend,
    "outlines": outlines_backend,
    "lm-format-enforcer": lmfe_backend,
    "llguidance": json_schema,
}
