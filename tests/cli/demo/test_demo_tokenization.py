"""Rollout and training tokenise alike: a version published by the trainer carries its chat
template, the simulation worker's HF policy prompts with it, and the trainer's transform
finds the recorded prompt where it renders the conversation itself (no mismatch)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from safactory.agents.envs.choice_env import LABELS, ChoiceEnv, choice_suite
from safactory.agents.policies.base import PolicyInput
from safactory.agents.policies.hf_local import HFLocalPolicy
from safactory.infra.models import SMOLLM2, ModelError, chat_ids, resolve_model
from safactory.schemas import (
    ChatMessage,
    FunctionCall,
    Outcome,
    ToolCall,
    Trajectory,
    TrajectoryStep,
)
from safactory.trainer.config import ModelConfig
from safactory.trainer.model import build_model
from safactory.trainer.tokenizer import build_tokenizer, render_prompt
from safactory.trainer.transform import TrajectoryTransformer
from safactory.trainer.weights import WeightStore


def test_the_chat_template_renders_what_the_trainer_renders() -> None:
    tokenizer = build_tokenizer("")
    call = ToolCall(id="c1", function=FunctionCall(name="shell", arguments='{"cmd": "ls \\"x\\""}'))
    messages = [
        ChatMessage(role="system", content="be careful"),
        ChatMessage(role="user", content="héllo\nthere"),
        ChatMessage(role="assistant", content="ok", tool_calls=[call]),
        ChatMessage(role="tool", tool_call_id="c1", content="done"),
        ChatMessage(role="developer", content=[{"type": "text", "text": "a"}, {"text": "b"}]),
    ]
    text = tokenizer.apply_chat_template(
        [m.model_dump(exclude_none=True) for m in messages],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tokenizer(str(text), add_special_tokens=False)["input_ids"]
    assert ids == render_prompt(tokenizer, messages)


async def test_a_published_version_prompts_the_policy_as_the_trainer_sees_it(
    tmp_path: Path,
) -> None:
    tokenizer = build_tokenizer(LABELS)
    config = ModelConfig(hidden_size=16, intermediate_size=32, num_layers=1, num_heads=2)
    model = build_model(config, len(tokenizer), int(tokenizer.pad_token_id or 0))
    stored = WeightStore(tmp_path, "hf-local").save(model, tokenizer, 0)
    policy = HFLocalPolicy(stored.uri, max_new_tokens=1)

    spec = choice_suite()[0]
    reset = ChoiceEnv().reset(spec)
    out = await policy.act(
        PolicyInput(messages=list(reset.prompt), tools=[], task=spec, step_index=0, seed=3)
    )
    assert out.prompt_token_ids == render_prompt(tokenizer, reset.prompt)

    trajectory = Trajectory(
        episode_id="e1",
        group_id="g",
        task_id=spec.task_id,
        env="choice",
        prompt=reset.prompt,
        outcome=Outcome.SUCCESS,
        reward=1.0,
        policy_version=0,
        max_policy_version=0,
        steps=[
            TrajectoryStep(
                step_index=0,
                messages=[out.message],
                token_ids=out.token_ids,
                logprobs=out.logprobs,
                prompt_token_ids=out.prompt_token_ids,
                policy_version=0,
            )
        ],
    )
    transformer = TrajectoryTransformer(tokenizer, max_len=512)
    (sequence,) = transformer.transform(trajectory)
    assert transformer.stats.prompt_mismatches == 0
    assert sequence.tokens[: len(out.prompt_token_ids or [])] == out.prompt_token_ids
    assert sequence.policy_tokens == 1


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct's folder (bootstrap.sh fetches and converts it once)."""
    try:
        return resolve_model(SMOLLM2, progress=False)
    except ModelError as exc:
        pytest.fail(f"{exc} (the test command's set-up does this)")


async def test_smollm2_rollout_ids_are_exactly_what_the_trainer_renders(smollm2: Path) -> None:
    policy = HFLocalPolicy(smollm2, max_new_tokens=6)
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template

    spec = choice_suite()[1]
    task = spec.model_copy(update={"params": {**spec.params, "shuffle": True}})
    reset = ChoiceEnv().reset(task, seed=5)
    out = await policy.act(
        PolicyInput(messages=list(reset.prompt), tools=[], task=task, step_index=0, seed=5)
    )
    assert out.prompt_token_ids and out.token_ids
    # The model's own chat template, its default system prompt untouched by ours.
    assert tokenizer.decode(out.prompt_token_ids).startswith("<|im_start|>system\nYou run")

    tool = ChatMessage(role="tool", tool_call_id="c", content="$ ls\nexit 0")
    recorded = TrajectoryStep(
        step_index=0,
        messages=[out.message],
        token_ids=out.token_ids,
        logprobs=out.logprobs,
        prompt_token_ids=out.prompt_token_ids,
        policy_version=0,
    )
    unrecorded = TrajectoryStep(
        step_index=0,
        messages=[out.message, tool],
        token_ids=out.token_ids,
        logprobs=out.logprobs,
        policy_version=0,
    )
    for step in (recorded, unrecorded):
        trajectory = Trajectory(
            episode_id="e1",
            group_id="g",
            task_id=spec.task_id,
            env="choice",
            prompt=reset.prompt,
            outcome=Outcome.SUCCESS,
            reward=1.0,
            policy_version=0,
            max_policy_version=0,
            steps=[step],
        )
        transformer = TrajectoryTransformer(tokenizer, max_len=1024)
        (sequence,) = transformer.transform(trajectory)
        prompt = out.prompt_token_ids
        assert transformer.stats.prompt_mismatches == 0
        assert transformer.stats.template_not_prefix == 0
        assert sequence.tokens[: len(prompt)] == prompt  # rendered by the trainer: the same
        generated = sequence.tokens[len(prompt) : len(prompt) + len(out.token_ids)]
        assert generated == out.token_ids
        assert sequence.loss_mask == [False] * len(prompt) + [True] * len(out.token_ids) + [
            False
        ] * (len(sequence.tokens) - len(prompt) - len(out.token_ids))

    # After the turn: <|im_end|> (added if the reply was cut short) and the template's
    # newline, then the tool message exactly as the template renders it in the conversation.
    def ids(messages: list[ChatMessage]) -> list[int]:
        dicts = [m.model_dump(exclude_none=True) for m in messages]
        return chat_ids(tokenizer, dicts, add_generation_prompt=False)

    turn = ids([*reset.prompt, out.message])
    tool_ids = ids([*reset.prompt, out.message, tool])[len(turn) :]
    end = len(prompt) + len(out.token_ids)
    assert sequence.tokens[end:] == [
        *([] if out.token_ids[-1] == tokenizer.eos_token_id else [tokenizer.eos_token_id]),
        *tokenizer("\n", add_special_tokens=False)["input_ids"],
        *tool_ids,
    ]
