"""The policy model (the tiny causal LM built from a config, or a pretrained one), devices,
and log-probs."""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ..infra.models import resolve_model
from .config import ModelConfig, TrainerConfig
from .tokenizer import build_tokenizer


def build_model(config: ModelConfig, vocab_size: int, pad_token_id: int = 0) -> LlamaForCausalLM:
    """A randomly initialised causal LM of the given shape (seeded by ``config.seed``)."""
    llama = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=False,
        pad_token_id=pad_token_id,
        attn_implementation="sdpa",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        model = LlamaForCausalLM(llama)
    return model


def load_policy_model(config: ModelConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model to train and its tokenizer: ``tiny`` is built here (random init, character
    tokenizer); any other name is loaded in float32 from its Hugging Face folder
    (:func:`infra.models.resolve_model`) with its own tokenizer and chat template."""
    if config.name == "tiny":
        tokenizer = build_tokenizer(config.alphabet)
        return build_model(config, len(tokenizer), int(tokenizer.pad_token_id or 0)), tokenizer
    folder = resolve_model(config.name)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        folder, local_files_only=True, dtype=torch.float32, attn_implementation="sdpa"
    )
    return model, tokenizer


@dataclass(frozen=True)
class Placement:
    """Where the trainer computes: a torch device and the autocast dtype (``None`` = fp32)."""

    device: torch.device
    autocast_dtype: torch.dtype | None

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """Mixed-precision context for forward passes (master weights stay fp32)."""
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.autocast_dtype)


def resolve_placement(config: TrainerConfig) -> Placement:
    """The device and precision named by the config; ``torch_npu`` is imported only for npu."""
    if config.device == "npu":
        try:
            importlib.import_module("torch_npu")
        except ImportError:
            raise RuntimeError(
                "device='npu' needs the torch-npu package (pip install 'safactory[npu]'); "
                "or set device = 'cpu' / 'cuda' in [trainer]"
            ) from None
        bf16_ok = True
    elif config.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("device='cuda' but torch sees no CUDA GPU; set device = 'cpu'")
        bf16_ok = torch.cuda.is_bf16_supported()
    else:
        bf16_ok = False
    if config.dtype == "bfloat16" and config.device == "cpu":
        bf16_ok = True
    use_bf16 = config.dtype == "bfloat16" or (config.dtype == "auto" and bf16_ok)
    if config.dtype == "bfloat16" and not bf16_ok:
        raise RuntimeError(f"dtype='bfloat16' is not supported on {config.device}; use 'auto'")
    return Placement(torch.device(config.device), torch.bfloat16 if use_bf16 else None)


def packed_attention_mask(segment_ids: torch.Tensor) -> torch.Tensor:
    """Block-diagonal causal mask ``[B, 1, L, L]``: a token sees earlier tokens of its segment."""
    length = segment_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    return (same & causal)[:, None]


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    segment_ids: torch.Tensor,
    *,
    with_log_softmax: bool = False,
    only: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each token given the tokens before it in its segment.

    Returns ``[B, L]`` (position 0 of every row is 0: nothing predicts it) and, if asked,
    the full next-token log-softmax ``[B, L, V]`` aligned the same way. With ``only`` (a
    ``[B, L]`` bool mask), the output head runs on the masked positions alone and the
    others read 0: a prompt of 150 tokens and a reply of 10 then skip 94 % of the head and
    of the vocabulary-wide softmax (for models whose head is a plain linear layer, as
    Llama-family models' is; others take the full path).
    """
    mask = packed_attention_mask(segment_ids)
    head = model.get_output_embeddings()
    if only is None or with_log_softmax or not isinstance(head, torch.nn.Linear):
        logits = model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask).logits
        logp_all = torch.log_softmax(logits.float()[:, :-1], dim=-1)
        picked = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
        out = torch.nn.functional.pad(picked, (1, 0))
        full = torch.nn.functional.pad(logp_all, (0, 0, 1, 0)) if with_log_softmax else None
        return out, full
    hidden = model.get_decoder()(
        input_ids=input_ids, position_ids=position_ids, attention_mask=mask
    ).last_hidden_state
    wanted = only[:, 1:]
    logits = head(hidden[:, :-1][wanted]).float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:][wanted][:, None])
    out = torch.zeros(input_ids.shape, dtype=picked.dtype, device=picked.device)
    out[:, 1:][wanted] = picked[:, 0]
    return out, None
