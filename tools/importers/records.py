"""What an importer returns, and the registry importers join (like checkers).

A package adds a trace format without editing ours by declaring, in its ``pyproject.toml``::

    [project.entry-points."safactory.importers"]
    myformat = "my_pkg.traces:read_my_format"

The entry point names a :class:`Format` (or a function of one file, read from ``*.json`` and
``*.jsonl`` files); ``safactory audit --format myformat`` then reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...infra.registry import Registry, RegistryError
from ...schemas import Step
from ...schemas.headers import shown


def shown_id(value: object) -> str:
    """A value from the input as an error message quotes it: one short line."""
    text = str(value)
    return text if len(text) <= 80 and text.isprintable() else shown(text)


class ImportFormatError(ValueError):
    """A trace file does not match its format; the message names file, record and field."""


@dataclass(frozen=True, slots=True)
class SkippedRecord:
    """An input record (or a whole file) that could not be read, and why."""

    id: str
    """The record's id as its audit line would carry it (a file's path for a whole file)."""
    reason: str


@dataclass(slots=True)
class AuditRecord:
    """One imported trajectory and, where the input had them, its labels."""

    id: str
    """The input's own id (R-Judge ``id``; ``file:line`` for AgentDojo; for the other
    formats the record's ``id``, else ``file:line`` or ``file:index``)."""
    key: str
    """Unique across files (``file:id``): what splits and episode ids hash."""
    source: str
    steps: list[Step]
    unsafe: bool | None = None
    group: str = ""
    """R-Judge category (file stem), AgentDojo suite, else the record's ``group`` or file stem."""
    attack: str | None = None
    """R-Judge ``attack_type``; AgentDojo ``clean`` / ``resisted`` / ``succeeded``; else the
    record's ``attack``."""
    labels: dict[str, Any] = field(default_factory=dict)


Entries = Iterable[AuditRecord | SkippedRecord]
Reader = Callable[[Path], Entries]
"""Reads one file: its records, or a :class:`SkippedRecord` per record it could not read.
A generator reads a record at a time (the built-ins do), so memory follows the largest
record, not the file; a list works too."""


@dataclass(frozen=True, slots=True)
class Format:
    """A trace format: how to read one file, and which files of a folder are its."""

    name: str
    read: Reader
    patterns: tuple[str, ...] = ("*.json", "*.jsonl")


def _accept(name: str, item: Format | Reader) -> Format:
    if isinstance(item, Format):
        return item
    if not callable(item):
        raise TypeError(f"{item!r} is neither a Format nor a reader of one file")
    return Format(name, item)


IMPORTERS: Registry[Format] = Registry(
    "trace format",
    "safactory.importers",
    builtins=(
        "safactory.tools.importers.formats",
        "safactory.tools.importers.agentleak",
    ),
    accept=_accept,  # type: ignore[arg-type]
    error=RegistryError,
)


def register_format(name: str, patterns: tuple[str, ...]) -> Callable[[Reader], Reader]:
    """Decorator: make a reader of one file available as ``--format name``."""

    def wrap(read: Reader) -> Reader:
        IMPORTERS.add(name, Format(name, read, patterns))
        return read

    return wrap
