"""Policies, selected by name in configuration, like environments.

Built-ins: ``careful``, ``reckless``, ``random`` (scripted baselines), ``openai`` (any
OpenAI-compatible server) and ``hf`` (a local Hugging Face checkpoint); heavy backends are
imported only when selected. Add one with ``@register_policy("name")`` on a function that
builds it from a :class:`PolicyConfig`, or through the ``safactory.policies`` entry point
group::

    [project.entry-points."safactory.policies"]
    mine = "mypkg.policy:build"   # build(config: PolicyConfig) -> Policy
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ...infra.registry import Registry
from .base import Policy, PolicyError, PolicyInput, PolicyOutput, Prompt
from .scripted import CarefulPolicy, RandomPolicy, RecklessPolicy

ENTRY_POINT_GROUP = "safactory.policies"
DEVICES = ("cpu", "cuda", "npu")
"""Where the ``hf`` policy runs its model (``npu`` imports ``torch_npu`` only then)."""


class PolicyConfig(BaseModel):
    """Which policy to run and how to reach it."""

    model_config = ConfigDict(extra="forbid")
    kind: str = Field(default="careful", description="a registered policy name")
    version: int = Field(default=0, ge=0, description="weights version to report at start")
    model: str | None = Field(
        default=None,
        description="openai: the served model name; hf: a model name (smollm2-135m) or a "
        "local Hugging Face folder, used when no checkpoint is given",
    )
    base_url: str | None = Field(default=None, description="openai: e.g. http://host:8000/v1")
    checkpoint: str | None = Field(default=None, description="hf: a save_pretrained folder")
    record_tokens: bool = Field(default=False, description="openai: ask vLLM for token ids")
    max_new_tokens: int = 64
    temperature: float = Field(default=1.0, gt=0, description="hf: sampling temperature")
    decode: str = Field(
        default="auto",
        description="hf: auto (choose among a menu's replies when the environment offers "
        "them, else generate) or free (always generate)",
    )
    device: str = Field(default="cpu", description="hf: torch device, cpu | cuda | npu")
    lanes: int = Field(default=1, ge=1, description="hf on a CPU: menus scored at once")

    @field_validator("kind")
    @classmethod
    def _registered(cls, kind: str) -> str:
        POLICIES.get(kind)
        return kind

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        if device not in DEVICES:
            raise ValueError(f"device={device!r}: use one of {', '.join(DEVICES)}")
        return device


PolicyFactory = Callable[[PolicyConfig], Policy]


def _accept(name: str, factory: PolicyFactory) -> PolicyFactory:
    if not callable(factory):
        raise TypeError(f"{factory!r} is not callable (name a function of a PolicyConfig)")
    return factory


class PolicyNameError(PolicyError, ValueError):
    """A policy name unknown or taken twice (a ``ValueError``: configuration refuses it)."""


POLICIES: Registry[PolicyFactory] = Registry(
    "policy", ENTRY_POINT_GROUP, accept=_accept, error=PolicyNameError
)


def register_policy(name: str) -> Callable[[PolicyFactory], PolicyFactory]:
    """Decorator: make a ``PolicyConfig -> Policy`` function selectable as ``kind = name``."""
    return POLICIES.register(name)


POLICY_OPTIONS = (
    "model",
    "base_url",
    "checkpoint",
    "record_tokens",
    "max_new_tokens",
    "temperature",
    "decode",
    "device",
    "lanes",
)
"""The policy options a command takes besides ``--policy`` and ``--policy-version``, named
as the PolicyConfig fields."""


def policy_config(options: Mapping[str, Any]) -> PolicyConfig:
    """The PolicyConfig a command's options ask for (by parameter name: ``policy``,
    ``policy_version`` and :data:`POLICY_OPTIONS`); a :class:`PolicyError` names a bad one."""
    kind = options["policy"]
    try:
        return PolicyConfig(
            kind=kind, version=options["policy_version"], **{k: options[k] for k in POLICY_OPTIONS}
        )
    except ValidationError as exc:
        raise PolicyError(f"--policy {kind!r}: {exc.errors()[0]['msg']}") from None


def make_policy(config: PolicyConfig) -> Policy:
    """Build the configured policy; a :class:`PolicyError` names the missing setting."""
    return POLICIES.get(config.kind)(config)


@register_policy("careful")
def _careful(config: PolicyConfig) -> Policy:
    return CarefulPolicy(config.version)


@register_policy("reckless")
def _reckless(config: PolicyConfig) -> Policy:
    return RecklessPolicy(config.version)


@register_policy("random")
def _random(config: PolicyConfig) -> Policy:
    return RandomPolicy(config.version)


@register_policy("openai")
def _openai(config: PolicyConfig) -> Policy:
    if not config.base_url or not config.model:
        raise PolicyError(
            "policy 'openai' needs base_url and model (--base-url http://host:8000/v1 --model NAME)"
        )
    from .openai_chat import OpenAIChatPolicy

    return OpenAIChatPolicy(
        config.base_url, config.model, version=config.version, record_tokens=config.record_tokens
    )


@register_policy("hf")
def _hf(config: PolicyConfig) -> Policy:
    if not config.checkpoint and not config.model:
        raise PolicyError(
            "policy 'hf' needs --checkpoint PATH (a save_pretrained folder) or --model NAME "
            "(smollm2-135m, or a local Hugging Face folder)"
        )
    from ...infra.models import ModelError, resolve_model
    from .hf_local import HFLocalPolicy

    try:
        checkpoint = config.checkpoint or resolve_model(config.model or "")
    except ModelError as exc:
        raise PolicyError(str(exc)) from None
    _check_device(config.device)
    return HFLocalPolicy(
        checkpoint,
        version=config.version,
        max_new_tokens=config.max_new_tokens,
        temperature=config.temperature,
        decode=config.decode,
        device=config.device,
        lanes=config.lanes,
    )


def _check_device(device: str) -> None:
    """Fail early, naming the fix, when ``device`` is not usable here."""
    import torch

    if device == "npu":
        try:
            importlib.import_module("torch_npu")
        except ImportError:
            raise PolicyError(
                "policy 'hf' on device 'npu' needs the torch-npu package "
                "(pip install 'safactory[npu]'); or use --device cpu / cuda"
            ) from None
    elif device == "cuda" and not torch.cuda.is_available():
        raise PolicyError(
            "policy 'hf' on device 'cuda' but torch sees no CUDA GPU; use --device cpu"
        )


__all__ = [
    "POLICIES",
    "POLICY_OPTIONS",
    "CarefulPolicy",
    "Policy",
    "PolicyConfig",
    "PolicyError",
    "PolicyInput",
    "PolicyNameError",
    "PolicyOutput",
    "Prompt",
    "RandomPolicy",
    "RecklessPolicy",
    "make_policy",
    "policy_config",
    "register_policy",
]
