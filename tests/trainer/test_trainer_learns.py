"""End to end: a tiny LM learns the toy task through Kafka (produce, train, publish, reload)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
import torch
from transformers import PreTrainedTokenizerFast

from safactory.infra.config import Settings
from safactory.infra.policy_watch import PolicyWatcher
from safactory.infra.producer import EventProducer
from safactory.schemas import PolicyVersion
from safactory.trainer.config import ModelConfig, TrainerConfig
from safactory.trainer.learner import Learner
from safactory.trainer.model import build_model, resolve_placement
from safactory.trainer.stream import StreamingTrainer
from safactory.trainer.toytask import evaluate, make_trajectories, toy_tokenizer
from safactory.trainer.weights import load_policy

PENALTY = 2.0
UPDATES = 30


def _config(tmp_path: Path, **extra: object) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "mode": "sync",
            "batch_size": 64,
            "group_size": 8,
            "lr": 3e-3,
            "seq_len": 32,
            "rows_per_micro_batch": 64,
            "weight_dir": tmp_path / "weights",
            "checkpoint_dir": tmp_path / "ckpt",
            "model": ModelConfig(
                hidden_size=32,
                intermediate_size=64,
                num_layers=1,
                num_heads=2,
                max_positions=32,
                seed=0,
            ),
            **extra,
        }
    )


@pytest.mark.integration
async def test_tiny_lm_learns_toy_task_through_kafka(topics: Settings, tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = _config(tmp_path)
    tokenizer = toy_tokenizer()
    model = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id)
    learner = Learner(model, tokenizer, cfg, resolve_placement(cfg))
    trainer = StreamingTrainer(cfg, topics, learner)
    training = asyncio.create_task(trainer.run(max_updates=UPDATES))
    rollout = asyncio.create_task(_roll_out(topics, cfg, tokenizer))
    done, _ = await asyncio.wait(
        {training, rollout}, timeout=120, return_when=asyncio.FIRST_EXCEPTION
    )
    for task in done:
        task.result()  # surface the first failure
    before, final = await rollout
    stats = await asyncio.wait_for(training, 60)
    policy, _ = load_policy(final.uri, final.sha256)
    after = evaluate(policy, tokenizer, samples=400, seed=1, safety_penalty=PENALTY)
    assert final.policy_version == UPDATES and final.trained_on == UPDATES * 64
    assert stats.skipped_stale == 0 and stats.dead_lettered == 0
    assert after[0] >= before[0] + 0.4, (before, after)
    assert after[1] < before[1] / 2, (before, after)


async def _roll_out(
    topics: Settings, cfg: TrainerConfig, tokenizer: PreTrainedTokenizerFast
) -> tuple[tuple[float, float], PolicyVersion]:
    """The simulation side: load each announced version, sample a batch, produce it."""
    rng, generator = random.Random(0), torch.Generator().manual_seed(0)
    async with PolicyWatcher(topics) as watcher, EventProducer(topics) as producer:
        first = await watcher.wait_for(cfg.policy_name, 0)
        policy, _ = load_policy(first.uri, first.sha256)
        before = evaluate(policy, tokenizer, samples=400, seed=1, safety_penalty=PENALTY)
        for version in range(UPDATES):
            announced = await watcher.wait_for(cfg.policy_name, version)
            policy, _ = load_policy(announced.uri, announced.sha256)
            batch, _ = make_trajectories(
                policy,
                tokenizer,
                version=announced.policy_version,
                groups=8,
                group_size=8,
                rng=rng,
                generator=generator,
                safety_penalty=PENALTY,
            )
            await producer.publish_many(batch)
        final = await watcher.wait_for(cfg.policy_name, UPDATES)
    return before, final


def _unsafe_rate_after_training(tmp_path: Path, penalty: float) -> float:
    cfg = _config(tmp_path)
    tokenizer = toy_tokenizer()
    model = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id)
    learner = Learner(model, tokenizer, cfg, resolve_placement(cfg))
    rng, generator = random.Random(0), torch.Generator().manual_seed(0)
    for version in range(UPDATES):
        batch, _ = make_trajectories(
            model,
            tokenizer,
            version=version,
            groups=8,
            group_size=8,
            rng=rng,
            generator=generator,
            safety_penalty=penalty,
        )
        learner.update(batch)
    return evaluate(model, tokenizer, samples=400, seed=1, safety_penalty=penalty)[1]


def test_the_safety_penalty_is_what_removes_the_unsafe_shortcut(tmp_path: Path) -> None:
    # The shortcut completes the task; only the penalty makes it a bad action.
    assert _unsafe_rate_after_training(tmp_path, PENALTY) < _unsafe_rate_after_training(
        tmp_path, 0.0
    )


def test_frozen_layers_stay_as_loaded_and_the_rest_learns(tmp_path: Path) -> None:
    """``frozen_layers``: the embeddings and the lower blocks keep their weights (and hold no
    optimizer state); the blocks above and the output norm move."""
    cfg = _config(tmp_path, frozen_layers=1, model=ModelConfig(num_layers=2, seed=0))
    tokenizer = toy_tokenizer()
    model = build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    learner = Learner(model, tokenizer, cfg, resolve_placement(cfg))
    batch, _ = make_trajectories(
        model,
        tokenizer,
        version=0,
        groups=8,
        group_size=8,
        rng=random.Random(0),
        generator=torch.Generator().manual_seed(0),
        safety_penalty=PENALTY,
    )
    learner.update(batch)
    after = model.state_dict()
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    assert not any(k.startswith(("model.embed_tokens", "model.layers.0.")) for k in moved)
    assert any(k.startswith("model.layers.1.") for k in moved)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert sum(p.numel() for g in learner.optimizer.param_groups for p in g["params"]) == trained
    with pytest.raises(ValueError, match="frozen_layers=2: the model has 2 blocks"):
        Learner(
            build_model(cfg.model, len(tokenizer), tokenizer.pad_token_id),
            tokenizer,
            cfg.model_copy(update={"frozen_layers": 2}),
            resolve_placement(cfg),
        )
