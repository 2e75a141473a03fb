"""Packing training sequences into fixed-length rows and micro-batches.

Sequences are placed first-fit by decreasing length into rows of ``seq_len`` tokens. Each
sequence in a row is its own segment: positions restart at 0 and attention is
block-diagonal, so packing never lets one trajectory see another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .transform import TrainingSequence


@dataclass
class MicroBatch:
    """Tensors of ``rows × seq_len`` packed tokens, ready for one forward/backward pass."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    segment_ids: torch.Tensor
    """1, 2, … per sequence within a row; 0 is padding."""
    loss_mask: torch.Tensor
    behaviour_logprobs: torch.Tensor
    """NaN where the trajectory recorded none (treated as on-policy)."""
    advantages: torch.Tensor
    sequence_index: torch.Tensor
    """Index into the packed sequence list per token (−1 on padding)."""

    def to(self, device: torch.device) -> MicroBatch:
        """The same batch on ``device``."""
        return MicroBatch(**{k: v.to(device) for k, v in self.__dict__.items()})

    @property
    def policy_tokens(self) -> int:
        """Tokens that carry loss."""
        return int(self.loss_mask.sum())


def pack(
    sequences: list[TrainingSequence],
    advantages: list[float],
    *,
    seq_len: int,
    rows_per_micro_batch: int,
    pad_id: int,
) -> list[MicroBatch]:
    """Pack sequences (each with its advantage) into micro-batches of fixed-length rows."""
    if len(sequences) != len(advantages):
        raise ValueError("one advantage per sequence is needed")
    rows: list[list[int]] = []
    room: list[int] = []
    for index in sorted(range(len(sequences)), key=lambda i: -len(sequences[i].tokens)):
        length = len(sequences[index].tokens)
        if length > seq_len:
            raise ValueError(
                f"sequence of {length} tokens exceeds seq_len={seq_len}; truncate first"
            )
        for r, free in enumerate(room):
            if free >= length:
                rows[r].append(index)
                room[r] -= length
                break
        else:
            rows.append([index])
            room.append(seq_len - length)
    batches = []
    for start in range(0, len(rows), rows_per_micro_batch):
        chunk = rows[start : start + rows_per_micro_batch]
        batches.append(_tensors(chunk, sequences, advantages, seq_len, pad_id))
    return batches


def _tensors(
    rows: list[list[int]],
    sequences: list[TrainingSequence],
    advantages: list[float],
    seq_len: int,
    pad_id: int,
) -> MicroBatch:
    shape = (len(rows), seq_len)
    input_ids = torch.full(shape, pad_id, dtype=torch.long)
    position_ids = torch.zeros(shape, dtype=torch.long)
    segment_ids = torch.zeros(shape, dtype=torch.long)
    loss_mask = torch.zeros(shape, dtype=torch.bool)
    behaviour = torch.full(shape, math.nan, dtype=torch.float32)
    adv = torch.zeros(shape, dtype=torch.float32)
    seq_index = torch.full(shape, -1, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for segment, index in enumerate(members, start=1):
            seq = sequences[index]
            n = len(seq.tokens)
            span = slice(at, at + n)
            input_ids[r, span] = torch.tensor(seq.tokens)
            position_ids[r, span] = torch.arange(n)
            segment_ids[r, span] = segment
            loss_mask[r, span] = torch.tensor(seq.loss_mask)
            behaviour[r, span] = torch.tensor(seq.behaviour_logprobs, dtype=torch.float32)
            adv[r, span] = advantages[index]
            seq_index[r, span] = index
            at += n
        # Padding continues positions so no row starts a fresh segment at a pad token.
        position_ids[r, at:] = torch.arange(seq_len - at)
    loss_mask[:, 0] = False  # nothing predicts a row's first token
    return MicroBatch(input_ids, position_ids, segment_ids, loss_mask, behaviour, adv, seq_index)
