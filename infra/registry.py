"""Things chosen by name: one registry type for environments, checkers, injectors, policies
and reward rules.

Each kind has one :class:`Registry`. Built-ins register in code (``registry.register(name)``
as a decorator, or ``registry.add``); installed packages add more through an entry-point
group without editing ours::

    [project.entry-points."safactory.envs"]
    myenv = "mypkg.myenv:MyEnv"

A name belongs to one thing: registering a second, different thing under it raises the
kind's error naming both origins (module and name in code, or the entry point and the
package that declares it). Registering the very same object again is a no-op (a module
imported twice). Entry points are read when a name is first looked up, and again whenever
``sys.path`` has changed since (a package made importable at run time).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

T = TypeVar("T")


class RegistryError(LookupError):
    """A name is unknown or taken twice, or an entry point does not load."""


@dataclass(frozen=True)
class _Entry(Generic[T]):
    item: T
    origin: str


def origin_of(item: object) -> str:
    """Where ``item`` comes from, for messages: ``module.QualifiedName``."""
    module = getattr(item, "__module__", None) or type(item).__module__
    name = getattr(item, "__qualname__", None) or type(item).__qualname__
    return f"{module}.{name}"


def _entry_point_origin(ep: EntryPoint) -> str:
    dist = ep.dist
    package = f" (package {dist.name} {dist.version})" if dist is not None else ""
    return f"entry point {ep.name} = {ep.value} in group {ep.group!r}{package}"


class Registry(Generic[T]):
    """Names → things of one ``kind`` (``"environment"``, ``"checker"``, ...).

    ``builtins`` are modules imported before the first lookup (their decorators register);
    ``accept`` checks and prepares each thing as it is registered (raise ``TypeError`` to
    refuse it); ``error`` is the exception type raised for this kind (a subclass of
    :class:`RegistryError` or the component's own error).
    """

    def __init__(
        self,
        kind: str,
        entry_point_group: str,
        *,
        builtins: Iterable[str] = (),
        accept: Callable[[str, T], T] | None = None,
        error: type[Exception] = RegistryError,
    ) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.error = error
        self._builtins = tuple(builtins)
        self._accept = accept
        self._code: dict[str, _Entry[T]] = {}
        self._plugins: dict[str, _Entry[T]] = {}
        self._builtins_loaded = False
        self._scanned_path: tuple[str, ...] | None = None

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register the decorated class or function as ``name``."""

        def decorate(item: T) -> T:
            return self.add(name, item)

        return decorate

    def add(self, name: str, item: T, origin: str | None = None) -> T:
        """Register ``item`` as ``name`` (``origin`` defaults to its module and name)."""
        return self._claim(name, item, origin or origin_of(item), self._code)

    def get(self, name: str) -> T:
        """The thing registered as ``name``; the error lists the known names if absent."""
        entries = self._entries()
        if name not in entries:
            raise self.error(
                f"unknown {self.kind} {name!r}; known: {', '.join(sorted(entries)) or 'none'} "
                f"(add one in code, or with the {self.entry_point_group!r} entry point group)"
            )
        return entries[name].item

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._entries())

    def items(self) -> dict[str, T]:
        """Every registered thing by name: code registrations first, then entry points."""
        return {name: entry.item for name, entry in self._entries().items()}

    def _claim(self, name: str, item: T, origin: str, into: dict[str, _Entry[T]]) -> T:
        """Check ``name`` is free (or holds ``item`` already), accept ``item``, store it."""
        taken = self._code.get(name) or self._plugins.get(name)
        if taken is not None and taken.item is not item:
            raise self.error(
                f"{self.kind} name {name!r} is taken by {taken.origin}; cannot register "
                f"{origin} under it (rename one of them)"
            )
        if self._accept is not None:
            try:
                item = self._accept(name, item)
            except TypeError as exc:
                raise self.error(f"{self.kind} {name!r} from {origin}: {exc}") from None
        into[name] = _Entry(item, origin)
        return item

    def _entries(self) -> dict[str, _Entry[T]]:
        if not self._builtins_loaded:
            self._builtins_loaded = True
            for module in self._builtins:
                import_module(module)
        if self._scanned_path != tuple(sys.path):
            self._scan_entry_points()
        return {**self._code, **self._plugins}

    def _scan_entry_points(self) -> None:
        self._plugins = {}
        for ep in entry_points(group=self.entry_point_group):
            origin = _entry_point_origin(ep)
            try:
                target = ep.load()
            except Exception as exc:
                raise self.error(
                    f"{origin} failed to load: {exc!r}; fix or uninstall the package"
                ) from exc
            self._claim(ep.name, target, origin, self._plugins)
        self._scanned_path = tuple(sys.path)
