"""Policies, selected by configuration. Heavy backends are imported only when selected."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .base import Policy, PolicyError, PolicyInput, PolicyOutput
from .scripted import CarefulPolicy, RandomPolicy, RecklessPolicy

PolicyKind = Literal["careful", "reckless", "random", "openai", "hf"]


class PolicyConfig(BaseModel):
    """Which policy to run and how to reach it."""

    model_config = ConfigDict(extra="forbid")
    kind: PolicyKind = "careful"
    version: int = Field(default=0, ge=0, description="weights version to report at start")
    model: str | None = Field(default=None, description="openai: the served model name")
    base_url: str | None = Field(default=None, description="openai: e.g. http://host:8000/v1")
    checkpoint: str | None = Field(default=None, description="hf: a save_pretrained folder")
    record_tokens: bool = Field(default=False, description="openai: ask vLLM for token ids")
    max_new_tokens: int = 64


def make_policy(config: PolicyConfig) -> Policy:
    """Build the configured policy; a :class:`PolicyError` names the missing setting."""
    if config.kind == "careful":
        return CarefulPolicy(config.version)
    if config.kind == "reckless":
        return RecklessPolicy(config.version)
    if config.kind == "random":
        return RandomPolicy(config.version)
    if config.kind == "openai":
        if not config.base_url or not config.model:
            raise PolicyError(
                "policy 'openai' needs base_url and model "
                "(--base-url http://host:8000/v1 --model NAME)"
            )
        from .openai_chat import OpenAIChatPolicy

        return OpenAIChatPolicy(
            config.base_url,
            config.model,
            version=config.version,
            record_tokens=config.record_tokens,
        )
    if not config.checkpoint:
        raise PolicyError(
            "policy 'hf' needs checkpoint (--checkpoint PATH to a save_pretrained folder)"
        )
    from .hf_local import HFLocalPolicy

    return HFLocalPolicy(
        config.checkpoint, version=config.version, max_new_tokens=config.max_new_tokens
    )


__all__ = [
    "CarefulPolicy",
    "Policy",
    "PolicyConfig",
    "PolicyError",
    "PolicyInput",
    "PolicyOutput",
    "RandomPolicy",
    "RecklessPolicy",
    "make_policy",
]
