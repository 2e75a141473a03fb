"""Rollout and training tokenise alike: a version published by the trainer carries its chat
template, the simulation worker's HF policy prompts with it, and the trainer's transform
finds the recorded prompt where it renders the conversation itself (no mismatch)."""

from __future__ import annotations

from pathlib import Path

from safactory.agents.envs.choice_env import LABELS, ChoiceEnv, choice_suite
from safactory.agents.policies.base import PolicyInput
from safactory.agents.policies.hf_local import HFLocalPolicy
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
    out = await policy.act(PolicyInput(messages=list(reset.prompt), tools=[], task=spec,
                                       step_index=0, seed=3))  # fmt: skip
    assert out.prompt_token_ids == render_prompt(tokenizer, reset.prompt)

    trajectory = Trajectory(
        episode_id="e1", group_id="g", task_id=spec.task_id, env="choice",
        prompt=reset.prompt, outcome=Outcome.SUCCESS, reward=1.0, policy_version=0,
        max_policy_version=0,
        steps=[TrajectoryStep(step_index=0, messages=[out.message], token_ids=out.token_ids,
                              logprobs=out.logprobs, prompt_token_ids=out.prompt_token_ids,
                              policy_version=0)],
    )  # fmt: skip
    transformer = TrajectoryTransformer(tokenizer, max_len=512)
    (sequence,) = transformer.transform(trajectory)
    assert transformer.stats.prompt_mismatches == 0
    assert sequence.tokens[: len(out.prompt_token_ids or [])] == out.prompt_token_ids
    assert sequence.policy_tokens == 1
