"""A tiny random-init causal LM and a tokenizer trained in code (nothing downloaded)."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast


def tiny_lm(corpus: list[str]) -> tuple[GPT2LMHeadModel, PreTrainedTokenizerFast]:
    """A 1-layer GPT-2 (32 dims) and a 300-token BPE tokenizer fitted on ``corpus``."""
    raw = Tokenizer(models.BPE(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["[UNK]"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=tokenizer.vocab_size, n_positions=512, n_embd=32, n_layer=1, n_head=2
    )
    return GPT2LMHeadModel(config), tokenizer
