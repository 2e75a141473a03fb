"""The checker registry: built-ins register by decorator, plugins through entry points.

A package adds checkers without editing ours by declaring, in its ``pyproject.toml``::

    [project.entry-points."safactory.checkers"]
    my_checker = "my_pkg.checks:MyChecker"

The entry point names a :class:`~.api.Checker` subclass (instantiated with no arguments) or
a zero-argument factory returning a checker instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import TypeVar

from .api import Checker

ENTRY_POINT_GROUP = "safactory.checkers"

CheckerFactory = Callable[[], Checker]
C = TypeVar("C", bound=type[Checker])

_BUILTIN: dict[str, CheckerFactory] = {}
_DEFAULT_OFF: set[str] = set()


class RegistryError(LookupError):
    """A checker name is unknown, duplicated, or its entry point does not load."""


def register(*, enabled_by_default: bool = True) -> Callable[[C], C]:
    """Class decorator: make a checker available by its ``name``."""

    def wrap(cls: C) -> C:
        if cls.name in _BUILTIN:
            raise RegistryError(f"checker {cls.name!r} is registered twice")
        _BUILTIN[cls.name] = cls
        if not enabled_by_default:
            _DEFAULT_OFF.add(cls.name)
        return cls

    return wrap


def _load_builtins() -> None:
    from . import checkers  # noqa: F401  (registers the built-in checkers on import)


def plugin_factories() -> dict[str, CheckerFactory]:
    """Checkers declared by installed packages under the ``safactory.checkers`` group."""
    found: dict[str, CheckerFactory] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            target = ep.load()
        except Exception as exc:
            raise RegistryError(
                f"entry point {ep.name!r} = {ep.value!r} in group {ENTRY_POINT_GROUP!r} "
                f"failed to load: {exc!r}; fix or uninstall the package that declares it"
            ) from exc
        if not callable(target):
            raise RegistryError(f"entry point {ep.name!r} = {ep.value!r} is not callable")
        found[ep.name] = target
    return found


def available() -> dict[str, CheckerFactory]:
    """Every known checker by name: built-ins, then plugins (a plugin may not shadow one)."""
    _load_builtins()
    out = dict(_BUILTIN)
    for name, factory in plugin_factories().items():
        if name in out:
            raise RegistryError(
                f"plugin checker {name!r} clashes with a built-in; rename its entry point"
            )
        out[name] = factory
    return out


def default_names() -> list[str]:
    """Names of the checkers that run when none are chosen (LLM judges are off by default)."""
    return [name for name in available() if name not in _DEFAULT_OFF]


def create(names: Iterable[str] | None = None) -> list[Checker]:
    """Instantiate the named checkers (default: :func:`default_names`), in that order."""
    factories = available()
    chosen = list(names) if names is not None else default_names()
    unknown = [n for n in chosen if n not in factories]
    if unknown:
        raise RegistryError(
            f"unknown checker(s) {', '.join(unknown)}; known: {', '.join(sorted(factories))}"
        )
    checkers = []
    for name in chosen:
        checker = factories[name]()
        if not isinstance(checker, Checker):
            raise RegistryError(f"checker {name!r} built a {type(checker).__name__}, not a Checker")
        checkers.append(checker)
    return checkers
