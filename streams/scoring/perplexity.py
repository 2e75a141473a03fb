"""Perplexity and IFD (instruction-following difficulty) from any Hugging Face causal LM.

``IFD = PPL(answer | instruction) / PPL(answer)``: near or above 1 the instruction hardly
helps predict the answer (hard, informative pairs); far below 1 the answer follows
trivially from the instruction.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch


class LMScorer:
    """Scores texts with ``model`` (an ``AutoModelForCausalLM``) and its ``tokenizer``."""

    def __init__(self, model: Any, tokenizer: Any, max_tokens: int = 512) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens

    @classmethod
    def load(cls, folder: str | Path) -> LMScorer:
        """The scorer of the saved Hugging Face causal LM in ``folder`` (no download)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        return cls(
            AutoModelForCausalLM.from_pretrained(folder, local_files_only=True),
            AutoTokenizer.from_pretrained(folder, local_files_only=True),
        )

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @torch.no_grad()
    def _mean_nll(self, context: list[int], target: list[int]) -> float:
        """Mean negative log-likelihood of ``target`` tokens after ``context``."""
        target = target[: self.max_tokens]
        context = context[-(self.max_tokens - len(target)) :] if context else []
        if not context:  # the first token has no prediction; score the rest
            context, target = target[:1], target[1:]
        if not target:
            return 0.0
        ids = torch.tensor([context + target])
        logits = self.model(input_ids=ids).logits[0, len(context) - 1 : -1]
        return torch.nn.functional.cross_entropy(logits, torch.tensor(target)).item()

    def perplexity(self, text: str) -> float:
        """PPL of ``text`` on its own."""
        return math.exp(self._mean_nll([], self._ids(text)))

    def conditional_perplexity(self, answer: str, instruction: str) -> float:
        """PPL of ``answer`` given ``instruction`` before it."""
        return math.exp(self._mean_nll(self._ids(instruction + "\n"), self._ids(answer)))

    def ifd(self, instruction: str, answer: str) -> float:
        """``PPL(answer | instruction) / PPL(answer)``."""
        alone = self.perplexity(answer)
        return self.conditional_perplexity(answer, instruction) / alone if alone else 0.0
