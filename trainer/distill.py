"""On-policy distillation plugin: a teacher that scores the student's own tokens.

The teacher must share the student's tokenizer (same vocabulary, same ids); it is checked
when the teacher is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from .model import Placement, token_logprobs
from .packing import MicroBatch
from .weights import load_policy


class Teacher(Protocol):
    """Anything that gives per-token logprobs of a packed micro-batch."""

    def token_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        """``[rows, seq_len]`` log π_teacher(token | earlier tokens of its segment)."""
        ...


class LocalTeacher:
    """A causal LM held in this process (frozen, no gradients)."""

    def __init__(self, model: PreTrainedModel, placement: Placement) -> None:
        self.model = model.to(placement.device).eval().requires_grad_(False)
        self.placement = placement

    @classmethod
    def load(
        cls, path: Path, student_tokenizer: PreTrainedTokenizerFast, placement: Placement
    ) -> LocalTeacher:
        """Load teacher weights from a weight-store directory; refuse another tokenizer."""
        model, tokenizer = load_policy(path)
        if tokenizer.get_vocab() != student_tokenizer.get_vocab():
            raise ValueError(
                f"distill.teacher={path}: its tokenizer differs from the student's; on-policy "
                "distillation needs a teacher that shares the tokenizer"
            )
        return cls(model, placement)

    @torch.no_grad()
    def token_logprobs(self, batch: MicroBatch) -> torch.Tensor:
        with self.placement.autocast():
            out, _ = token_logprobs(
                self.model, batch.input_ids, batch.position_ids, batch.segment_ids
            )
        return out
