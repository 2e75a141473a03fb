"""Simulation: environments behind one protocol, the pre-warmed pool, the backtracking
sandbox, attack injection, policies and the episode runner (DESIGN.md, ``agents/``).

The names below load with their module on first use (``from safactory.agents import
EpisodeRunner``), so importing one submodule (an environment, the guard) does not load the
runner, the pools and the broker clients behind them."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_HOMES = {
    **dict.fromkeys(("AttackInjector", "make_injector", "register_injector"), "attacks"),
    **dict.fromkeys(
        (
            "Anchor",
            "EnvError",
            "Environment",
            "Judgement",
            "ResetOutput",
            "StepOutput",
            "TaskSpec",
            "text_action",
            "tool",
            "tool_action",
        ),
        "env",
    ),
    **dict.fromkeys(("Guard", "GuardDecision", "PatternGuard", "ProposedAction"), "guard"),
    **dict.fromkeys(("ActorPool", "EnvPool"), "pools"),
    **dict.fromkeys(("env_class", "env_names", "make_env", "register_env"), "registry"),
    **dict.fromkeys(("EpisodeResult", "EpisodeRunner"), "runner"),
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{home}", __name__), name)
