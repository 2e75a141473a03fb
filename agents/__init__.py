"""Simulation: environments behind one protocol, the pre-warmed pool, the backtracking
sandbox, attack injection, policies and the episode runner (DESIGN.md, ``agents/``)."""

from .attacks import AttackInjector, make_injector, register_injector
from .env import (
    Anchor,
    EnvError,
    Environment,
    Judgement,
    ResetOutput,
    StepOutput,
    TaskSpec,
    text_action,
    tool,
    tool_action,
)
from .guard import Guard, GuardDecision, PatternGuard, ProposedAction
from .pools import ActorPool, EnvPool
from .registry import env_class, env_names, make_env, register_env
from .runner import EpisodeResult, EpisodeRunner

__all__ = [
    "ActorPool",
    "Anchor",
    "AttackInjector",
    "EnvError",
    "EnvPool",
    "Environment",
    "EpisodeResult",
    "EpisodeRunner",
    "Guard",
    "GuardDecision",
    "Judgement",
    "PatternGuard",
    "ProposedAction",
    "ResetOutput",
    "StepOutput",
    "TaskSpec",
    "env_class",
    "env_names",
    "make_env",
    "make_injector",
    "register_env",
    "register_injector",
    "text_action",
    "tool",
    "tool_action",
]
