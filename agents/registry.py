"""Environments by name: ``@register_env("name")`` here, or the ``safactory.envs`` entry points.

A third-party package adds an environment without editing ours::

    [project.entry-points."safactory.envs"]
    myenv = "mypkg.myenv:MyEnv"
"""

from __future__ import annotations

from collections.abc import Callable

from ..infra.registry import Registry
from .env import EnvError, Environment

ENTRY_POINT_GROUP = "safactory.envs"
BUILTIN_MODULES = (
    "safactory.agents.envs.os_env",
    "safactory.agents.envs.tool_env",
    "safactory.agents.envs.qa_env",
    "safactory.agents.envs.embodied_env",
    "safactory.agents.envs.android_env",
    "safactory.agents.envs.choice_env",
)


def _accept(name: str, cls: type[Environment]) -> type[Environment]:
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise TypeError(f"needs an Environment subclass, got {cls!r}")
    cls.name = name
    return cls


ENVIRONMENTS: Registry[type[Environment]] = Registry(
    "environment", ENTRY_POINT_GROUP, builtins=BUILTIN_MODULES, accept=_accept, error=EnvError
)


def register_env(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: make an :class:`Environment` subclass available as ``name``."""
    return ENVIRONMENTS.register(name)


def env_names() -> list[str]:
    """Every registered environment name (built-ins and entry points)."""
    return ENVIRONMENTS.names()


def env_class(name: str) -> type[Environment]:
    """The class registered as ``name``; :class:`EnvError` lists the known names if absent."""
    return ENVIRONMENTS.get(name)


def suite_sizes(name: str) -> tuple[int, int, int]:
    """How many tasks the suite of env ``name`` holds: all, capability and safety ones."""
    suite = env_class(name).suite()
    kinds = [t.kind for t in suite]
    return len(suite), kinds.count("capability"), kinds.count("safety")


def make_env(name: str) -> Environment:
    """A new, not yet reset, environment of kind ``name``."""
    return env_class(name)()
