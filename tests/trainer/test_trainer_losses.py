"""Advantages, the decoupled clipped loss and on-policy distillation, without a broker."""

from __future__ import annotations

import math
import random

import pytest
import torch

from safactory.schemas import ChatMessage
from safactory.trainer.advantages import group_relative_advantages
from safactory.trainer.config import ModelConfig, TrainerConfig
from safactory.trainer.distill import LocalTeacher
from safactory.trainer.learner import Learner
from safactory.trainer.losses import policy_loss, reverse_kl
from safactory.trainer.model import build_model, resolve_placement, token_logprobs
from safactory.trainer.tokenizer import render_prompt
from safactory.trainer.toytask import make_trajectories, toy_tokenizer


def test_group_relative_advantages() -> None:
    adv = group_relative_advantages(["a", "a", "b", "c", "c"], [1.0, 0.0, 5.0, 2.0, 2.0])
    assert adv[0] == pytest.approx(1.0, abs=1e-4) and adv[1] == pytest.approx(-1.0, abs=1e-4)
    assert adv[2] == 0.0 and adv[3] == adv[4] == 0.0


def test_ratio_clipping_and_capped_behaviour_weight() -> None:
    logp = torch.tensor([[0.0, math.log(2.0), math.log(2.0)]], requires_grad=True)
    proximal = torch.zeros(1, 3)
    behaviour = torch.tensor([[math.log(0.01), math.nan, 0.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0]])
    mask = torch.tensor([[True, True, True]])
    terms = policy_loss(
        logp, proximal, behaviour, adv, mask, clip_low=0.2, clip_high=0.2, behaviour_weight_cap=5.0
    )
    terms.loss_sum.backward()
    grad = logp.grad[0]
    # token 0: on the proximal policy, weight π_prox/π_b = 100 capped at 5.
    assert grad[0].item() == pytest.approx(-5.0)
    # token 1: ratio 2 > 1.2 with A > 0 is clipped: no gradient (NaN behaviour = on-policy).
    assert grad[1].item() == 0.0
    # token 2: ratio 2 with A < 0 is not clipped (pessimistic bound): gradient flows.
    assert grad[2].item() == pytest.approx(2.0)
    assert terms.clipped_tokens == 1


def _reverse_kl_on_prompts(student, teacher, tokenizer) -> float:
    prompts = [
        render_prompt(tokenizer, [ChatMessage(role="user", content=str(d))]) for d in range(10)
    ]
    ids = torch.tensor(prompts)
    with torch.no_grad():
        s = torch.log_softmax(student(input_ids=ids).logits[:, -1].float(), -1)
        t = torch.log_softmax(teacher(input_ids=ids).logits[:, -1].float(), -1)
    return float(reverse_kl(s[:, None], t[:, None], torch.ones(10, 1, dtype=torch.bool)))


def test_on_policy_distillation_lowers_reverse_kl_to_teacher() -> None:
    torch.manual_seed(0)
    tokenizer = toy_tokenizer()
    shape = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_layers": 1,
        "num_heads": 2,
        "max_positions": 32,
    }
    cfg = TrainerConfig.model_validate(
        {
            "lr": 3e-3,
            "seq_len": 32,
            "rows_per_micro_batch": 64,
            "model": {**shape, "seed": 0},
            "distill": {"pure": True},
        }
    )
    teacher_model = build_model(ModelConfig(**shape, seed=7), len(tokenizer))
    student = build_model(cfg.model, len(tokenizer))
    placement = resolve_placement(cfg)
    learner = Learner(
        student, tokenizer, cfg, placement, teacher=LocalTeacher(teacher_model, placement)
    )
    before = _reverse_kl_on_prompts(student, teacher_model, tokenizer)
    rng, generator = random.Random(0), torch.Generator().manual_seed(0)
    estimates = []
    for version in range(30):
        batch, _ = make_trajectories(
            student,
            tokenizer,
            version=version,
            groups=8,
            group_size=8,
            rng=rng,
            generator=generator,
            safety_penalty=0.0,
        )
        estimates.append(learner.update(batch).teacher_kl)
    after = _reverse_kl_on_prompts(student, teacher_model, tokenizer)
    assert after < 0.5 * before, (before, after)
    assert all(e is not None for e in estimates)


def test_token_logprobs_are_normalised() -> None:
    tokenizer = toy_tokenizer()
    model = build_model(
        ModelConfig(hidden_size=32, intermediate_size=64, num_heads=2), len(tokenizer)
    )
    ids = torch.tensor([[1, 2, 3, 4]])
    _, full = token_logprobs(
        model, ids, torch.arange(4)[None], torch.ones_like(ids), with_log_softmax=True
    )
    assert full is not None
    assert torch.allclose(full[0, 1:].exp().sum(-1), torch.ones(3), atol=1e-5)


def test_minibatch_steps_move_the_ratio_and_clipping_engages() -> None:
    torch.manual_seed(0)
    tokenizer = toy_tokenizer()
    cfg = TrainerConfig.model_validate(
        {
            "lr": 3e-2,
            "seq_len": 32,
            "rows_per_micro_batch": 2,
            "minibatches": 4,
            "clip_low": 0.05,
            "clip_high": 0.05,
            "model": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_layers": 1,
                "num_heads": 2,
                "max_positions": 32,
            },
        }
    )
    model = build_model(cfg.model, len(tokenizer))
    learner = Learner(model, tokenizer, cfg, resolve_placement(cfg))
    batch, _ = make_trajectories(
        model,
        tokenizer,
        version=0,
        groups=8,
        group_size=8,
        rng=random.Random(0),
        generator=torch.Generator().manual_seed(0),
        safety_penalty=1.0,
    )
    metrics = learner.update(batch)
    assert metrics.clip_fraction > 0.0
    assert metrics.policy_tokens == sum(len(t.steps[0].token_ids or []) for t in batch)


def test_bf16_autocast_update_runs_on_cpu() -> None:
    tokenizer = toy_tokenizer()
    cfg = TrainerConfig.model_validate(
        {
            "dtype": "bfloat16",
            "seq_len": 32,
            "model": {
                "hidden_size": 32,
                "intermediate_size": 64,
                "num_layers": 1,
                "num_heads": 2,
                "max_positions": 32,
            },
        }
    )
    placement = resolve_placement(cfg)
    assert placement.autocast_dtype is torch.bfloat16
    model = build_model(cfg.model, len(tokenizer))
    learner = Learner(model, tokenizer, cfg, placement)
    batch, _ = make_trajectories(
        model,
        tokenizer,
        version=0,
        groups=4,
        group_size=4,
        rng=random.Random(1),
        generator=torch.Generator().manual_seed(1),
        safety_penalty=1.0,
    )
    metrics = learner.update(batch)
    assert math.isfinite(metrics.loss) and math.isfinite(metrics.grad_norm)
    assert next(model.parameters()).dtype is torch.float32  # master weights stay fp32


def test_token_logprobs_on_masked_positions_match_the_full_head() -> None:
    model = build_model(
        ModelConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2), vocab_size=40
    )
    ids = torch.randint(0, 40, (2, 12))
    positions = torch.cat([torch.arange(5), torch.arange(7)])[None].expand(2, -1)
    segments = torch.tensor([[1] * 5 + [2] * 7, [1] * 5 + [2] * 7])
    only = torch.zeros(2, 12, dtype=torch.bool)
    only[0, [3, 4, 9]] = only[1, [10, 11]] = True
    full, _ = token_logprobs(model, ids, positions, segments)
    fast, _ = token_logprobs(model, ids, positions, segments, only=only)
    assert torch.allclose(fast[only], full[only], atol=1e-6)
    assert (fast[~only] == 0).all()
