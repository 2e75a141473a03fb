"""Environments by name: ``@register_env("name")`` here, or the ``safactory.envs`` entry points.

A third-party package adds an environment without editing ours::

    [project.entry-points."safactory.envs"]
    myenv = "mypkg.myenv:MyEnv"
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from importlib.metadata import entry_points

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

_REGISTRY: dict[str, type[Environment]] = {}
_loaded = False


def register_env(name: str) -> Callable[[type[Environment]], type[Environment]]:
    """Class decorator: make an :class:`Environment` subclass available as ``name``."""

    def decorate(cls: type[Environment]) -> type[Environment]:
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise TypeError(f"@register_env({name!r}) needs an Environment subclass, got {cls!r}")
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise EnvError(f"environment name {name!r} is taken by {existing.__qualname__}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in BUILTIN_MODULES:
        import_module(module)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _REGISTRY:
            continue
        cls = ep.load()
        register_env(ep.name)(cls)


def env_names() -> list[str]:
    """Every registered environment name (built-ins and entry points)."""
    _load()
    return sorted(_REGISTRY)


def env_class(name: str) -> type[Environment]:
    """The class registered as ``name``; :class:`EnvError` lists the known names if absent."""
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise EnvError(
            f"unknown environment {name!r}; known: {', '.join(sorted(_REGISTRY))} "
            f"(add one with @register_env or the {ENTRY_POINT_GROUP!r} entry point group)"
        ) from None


def make_env(name: str) -> Environment:
    """A new, not yet reset, environment of kind ``name``."""
    return env_class(name)()
