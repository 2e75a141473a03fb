"""Trajectory transformation and packing, without a broker."""

from __future__ import annotations

import math

import pytest
import torch

from safactory.schemas import ChatMessage, Outcome, Trajectory, TrajectoryStep
from safactory.trainer.config import ModelConfig
from safactory.trainer.model import build_model, token_logprobs
from safactory.trainer.packing import pack
from safactory.trainer.tokenizer import build_tokenizer, encode_text, end_id, render_prompt
from safactory.trainer.transform import TrajectoryError, TrajectoryTransformer

TOK = build_tokenizer()


def _trajectory(steps: list[TrajectoryStep], prompt: str = "do it") -> Trajectory:
    return Trajectory(
        episode_id="ep1",
        group_id="g1",
        task_id="t",
        env="e",
        prompt=[ChatMessage(role="user", content=prompt)],
        steps=steps,
        outcome=Outcome.SUCCESS,
        reward=1.0,
        policy_version=3,
        max_policy_version=3,
    )


def test_loss_mask_covers_policy_tokens_only_and_recorded_ids_are_used() -> None:
    first = [*encode_text(TOK, "ls"), end_id(TOK)]
    second = [*encode_text(TOK, "ok"), end_id(TOK)]
    steps = [
        TrajectoryStep(
            step_index=0,
            policy_version=3,
            token_ids=first,
            logprobs=[-0.5] * len(first),
            messages=[
                ChatMessage(role="assistant", content="ls"),
                ChatMessage(role="tool", content="a.txt"),
            ],
        ),
        TrajectoryStep(
            step_index=1,
            policy_version=3,
            token_ids=second,
            logprobs=[-0.25] * len(second),
            messages=[
                ChatMessage(role="user", content="next"),
                ChatMessage(role="assistant", content="ok"),
            ],
        ),
    ]
    transformer = TrajectoryTransformer(TOK, max_len=256)
    (seq,) = transformer.transform(_trajectory(steps))
    trained = [t for t, m in zip(seq.tokens, seq.loss_mask, strict=True) if m]
    assert trained == first + second
    assert [lp for lp, m in zip(seq.behaviour_logprobs, seq.loss_mask, strict=True) if m] == (
        [-0.5] * 3 + [-0.25] * 3
    )
    assert all(
        math.isnan(lp) for lp, m in zip(seq.behaviour_logprobs, seq.loss_mask, strict=True) if not m
    )
    assert TOK.decode(seq.tokens) == (
        "<|user|>do it<|end|><|assistant|>ls<|end|><|tool|>a.txt<|end|>"
        "<|user|>next<|end|><|assistant|>ok<|end|>"
    )
    assert transformer.stats.retokenize_checked == 2
    assert transformer.stats.retokenize_mismatches == 0


def test_retokenisation_mismatch_is_counted_and_recorded_ids_win() -> None:
    recorded = [*encode_text(TOK, "rm -rf"), end_id(TOK)]
    step = TrajectoryStep(
        step_index=0,
        policy_version=3,
        token_ids=recorded,
        messages=[ChatMessage(role="assistant", content="rm -r")],
    )
    transformer = TrajectoryTransformer(TOK, max_len=256)
    (seq,) = transformer.transform(_trajectory([step]))
    assert [t for t, m in zip(seq.tokens, seq.loss_mask, strict=True) if m] == recorded
    assert transformer.stats.retokenize_mismatches == 1


def test_recorded_prompt_that_does_not_extend_starts_a_new_sequence() -> None:
    own_prompt = render_prompt(TOK, [ChatMessage(role="user", content="other template")])
    answer = [*encode_text(TOK, "x"), end_id(TOK)]
    steps = [
        TrajectoryStep(
            step_index=0,
            policy_version=3,
            token_ids=answer,
            messages=[ChatMessage(role="assistant", content="x")],
        ),
        TrajectoryStep(
            step_index=1, policy_version=3, token_ids=answer, prompt_token_ids=own_prompt
        ),
    ]
    transformer = TrajectoryTransformer(TOK, max_len=256)
    first, second = transformer.transform(_trajectory(steps))
    assert transformer.stats.prompt_mismatches == 1
    assert second.tokens == own_prompt + answer
    assert first.policy_tokens == second.policy_tokens == len(answer)


def test_unrecorded_assistant_text_is_tokenised_and_counted() -> None:
    step = TrajectoryStep(
        step_index=0, policy_version=3, messages=[ChatMessage(role="assistant", content="hi")]
    )
    transformer = TrajectoryTransformer(TOK, max_len=256)
    (seq,) = transformer.transform(_trajectory([step]))
    assert seq.policy_tokens == 3 and transformer.stats.unrecorded_steps == 1


def test_packing_keeps_sequences_independent() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden_size=32, intermediate_size=64, num_heads=2), len(TOK))
    transformer = TrajectoryTransformer(TOK, max_len=64)
    seqs = []
    for text in ("alpha", "be", "gamma ray"):
        ids = [*encode_text(TOK, text), end_id(TOK)]
        step = TrajectoryStep(step_index=0, policy_version=3, token_ids=ids)
        seqs += transformer.transform(_trajectory([step], prompt=text[::-1]))
    (batch,) = pack(seqs, [1.0, 2.0, 3.0], seq_len=64, rows_per_micro_batch=4, pad_id=0)
    assert batch.input_ids.shape == (1, 64)  # all three share one row
    packed, _ = token_logprobs(model, batch.input_ids, batch.position_ids, batch.segment_ids)
    for index, seq in enumerate(seqs):
        alone = torch.tensor([seq.tokens])
        single, _ = token_logprobs(
            model, alone, torch.arange(len(seq.tokens))[None], torch.ones_like(alone)
        )
        where = batch.sequence_index[0] == index
        assert torch.allclose(packed[0, where][1:], single[0, 1:], atol=1e-5)
        assert torch.all(batch.advantages[0, where] == float(index + 1))
    assert int(batch.loss_mask.sum()) == sum(s.policy_tokens for s in seqs)


def test_ids_outside_the_vocabulary_are_refused_with_the_step_named() -> None:
    step = TrajectoryStep(step_index=4, policy_version=3, token_ids=[5, len(TOK) + 3])
    with pytest.raises(TrajectoryError, match=r"step 4: token_ids .* vocabulary"):
        TrajectoryTransformer(TOK, max_len=64).transform(_trajectory([step]))
    unpaired = TrajectoryStep(step_index=1, policy_version=3, token_ids=[5, 6], logprobs=[-1.0])
    with pytest.raises(TrajectoryError, match="1 logprobs for 2 token_ids"):
        TrajectoryTransformer(TOK, max_len=64).validate(_trajectory([unpaired]))
