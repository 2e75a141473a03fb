"""Importers: traces users already have → Safactory ``Step``s.

Formats (docs/AUDIT_FORMATS.md) are registered by name (:data:`IMPORTERS`, entry-point group
``safactory.importers``): R-Judge, AgentDojo, OpenAI chat message lists, OpenHands event
lists, a documented generic JSON, OpenTelemetry GenAI spans and AgentLeak multi-agent runs.
All become ordinary step events, so the batch audit, ``safactory import`` and the live
worker judge them with the same engine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ...schemas.headers import shown
from .formats import chat_steps, iter_steps
from .jsonstream import Bad, items, lines
from .records import (
    IMPORTERS,
    AuditRecord,
    Format,
    ImportFormatError,
    SkippedRecord,
    register_format,
)

__all__ = [
    "FORMATS",
    "IMPORTERS",
    "AuditRecord",
    "Format",
    "ImportFormatError",
    "SkippedRecord",
    "chat_steps",
    "detect_format",
    "formats",
    "iter_entries",
    "iter_steps",
    "read_entries",
    "read_records",
    "readable_records",
    "register_format",
]


def formats() -> tuple[str, ...]:
    """Every known format: the built-ins, then plugins."""
    return tuple(IMPORTERS.items())


FORMATS: tuple[str, ...] = formats()
"""The formats known when this module was imported (``formats()`` sees later plugins)."""


def iter_entries(path: Path, fmt: str) -> Iterator[AuditRecord | SkippedRecord]:
    """Every record of a file, or of every matching file under a directory, in input order,
    read one at a time (memory follows the largest record, not the input); a record (or
    file) that cannot be read is a :class:`SkippedRecord` saying where and why, and the
    others are still read. A wrong format or a missing path raises at once."""
    known = IMPORTERS.items()
    if fmt not in known:
        raise ImportFormatError(f"--format {shown(fmt)} is not one of {', '.join(known)}")
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or directory")
    if not path.is_dir() and not path.is_file():
        raise ImportFormatError(
            f"{path}: not a regular file or a folder (a device, pipe or socket is not read: "
            "save the traces to a file first)"
        )
    spec = known[fmt]
    files = sorted({f for p in spec.patterns for f in path.rglob(p)}) if path.is_dir() else [path]
    if not files:
        raise ImportFormatError(
            f"{path}: no {' or '.join(spec.patterns)} files found for --format {fmt}"
        )
    return (entry for file in files for entry in spec.read(file))


def read_entries(path: Path, fmt: str) -> list[AuditRecord | SkippedRecord]:
    """:func:`iter_entries` as a list."""
    return list(iter_entries(path, fmt))


def read_records(path: Path, fmt: str) -> list[AuditRecord]:
    """Like :func:`read_entries`, but the first unreadable record raises ImportFormatError."""
    records = []
    for entry in read_entries(path, fmt):
        if isinstance(entry, SkippedRecord):
            raise ImportFormatError(entry.reason)
        records.append(entry)
    return records


def readable_records(
    path: Path, fmt: str, *, strict: bool = False
) -> tuple[list[AuditRecord], list[SkippedRecord]]:
    """The input's records and those that could not be read; ImportFormatError when a strict
    run meets one (its reason) or nothing at all could be read (every reason)."""
    entries = read_entries(path, fmt)
    skipped = [e for e in entries if isinstance(e, SkippedRecord)]
    if skipped and (strict or len(skipped) == len(entries)):
        raise ImportFormatError(
            skipped[0].reason if strict else "; ".join(e.reason for e in skipped)
        )
    return [e for e in entries if isinstance(e, AuditRecord)], skipped


SHAPES: tuple[tuple[str, Callable[[dict[str, Any]], bool]], ...] = (
    ("rjudge", lambda r: "contents" in r),
    ("otel", lambda r: "resourceSpans" in r),
    ("agentleak", lambda r: "llm_calls" in r or "channel_messages" in r),
    ("agentdojo", lambda r: isinstance(r.get("metadata"), dict) and "messages" not in r),
    ("agentdojo", lambda r: "suite_name" in (r.get("metadata") or {})),
    ("openai", lambda r: "messages" in r or "role" in r),
    ("openhands", lambda r: bool(r.keys() & {"events", "history", "action", "observation"})),
    ("generic", lambda r: bool(r.keys() & {"steps", "turns"})),
)
"""Each format by the keys of a file's first record, most particular first."""


def detect_format(path: Path) -> str:
    """The format of ``path`` (a file, or the first trace file of a folder) from its first
    record's keys; :class:`ImportFormatError` says what it holds and to pass ``--format``."""
    if not path.exists():
        raise ImportFormatError(f"{path}: no such file or directory")
    files = [path] if path.is_file() else sorted(path.rglob("*.json*")) if path.is_dir() else []
    first = next(
        (v for f in files[:1] for _, v in (lines(f) if f.suffix == ".jsonl" else items(f))), None
    )
    if isinstance(first, list) and first:  # one trajectory given as its list of items
        first = first[0]
    if isinstance(first, dict):
        for fmt, fits in SHAPES:
            if fits(first):
                return fmt
    what = "no JSON record" if first is None or isinstance(first, Bad) else type(first).__name__
    raise ImportFormatError(
        f"{path}: its format could not be told from its first record ({what}, keys "
        f"{sorted(first)[:8] if isinstance(first, dict) else '-'}); pass --format, one of "
        f"{', '.join(IMPORTERS.items())} (docs/AUDIT_FORMATS.md)"
    )
