"""The checker registry: built-ins register by decorator, plugins through entry points.

A package adds checkers without editing ours by declaring, in its ``pyproject.toml``::

    [project.entry-points."safactory.checkers"]
    my_checker = "my_pkg.checks:MyChecker"

The entry point names a :class:`~.api.Checker` subclass (instantiated with no arguments) or
a zero-argument factory returning a checker instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from ...infra.registry import Registry, RegistryError
from .api import Checker

ENTRY_POINT_GROUP = "safactory.checkers"

CheckerFactory = Callable[[], Checker]
C = TypeVar("C", bound=type[Checker])


def _accept(name: str, factory: CheckerFactory) -> CheckerFactory:
    if not callable(factory):
        raise TypeError(f"{factory!r} is not callable (name a Checker subclass or a factory)")
    return factory


CHECKERS: Registry[CheckerFactory] = Registry(
    "checker",
    ENTRY_POINT_GROUP,
    builtins=("safactory.streams.audit.checkers",),
    accept=_accept,
    error=RegistryError,
)
_DEFAULT_OFF: set[str] = set()


def register(*, enabled_by_default: bool = True) -> Callable[[C], C]:
    """Class decorator: make a checker available by its ``name``."""

    def wrap(cls: C) -> C:
        CHECKERS.add(cls.name, cls)
        if not enabled_by_default:
            _DEFAULT_OFF.add(cls.name)
        return cls

    return wrap


def available() -> dict[str, CheckerFactory]:
    """Every known checker by name: built-ins, then plugins (a name is never taken twice)."""
    return CHECKERS.items()


def default_names() -> list[str]:
    """Names of the checkers that run when none are chosen (LLM judges are off by default)."""
    return [name for name in available() if name not in _DEFAULT_OFF]


def catalogue() -> list[tuple[str, str, str, str, str, str]]:
    """Every checker as ``safactory audit --list-checkers`` shows it: name, kind, scope, risk
    types, on or off by default, what it finds."""
    defaults = set(default_names())
    rows = []
    for name, factory in available().items():
        cls = factory if isinstance(factory, type) else type(factory())
        on = "on" if name in defaults else "off"
        rows.append((name, cls.kind, cls.scope, ", ".join(cls.risk_types), on, cls.description))
    return rows


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
