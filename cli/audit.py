"""CLI commands of the auditor: batch audit and import to Kafka (the live worker:
:mod:`.worker`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..streams.audit import registry
from ..streams.audit.batch import LabelTally, audit_record, explained, stop_on_interrupt
from ..streams.audit.engine import AuditEngine, configured_engine
from ..streams.audit.importers import (
    FORMATS,
    AuditRecord,
    ImportFormatError,
    SkippedRecord,
    iter_entries,
    iter_steps,
    read_entries,
)
from .errors import broker_failure, get_settings
from .errors import fail as _fail

console = Console()
err = Console(stderr=True, soft_wrap=True)

FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        "-f",
        help=f"input format: {' | '.join(FORMATS)} (fields and examples: docs/AUDIT_FORMATS.md)",
    ),
]
CheckersOption = Annotated[
    str | None,
    typer.Option(
        "--checkers",
        help="comma-separated checker names (default: every checker on by default; "
        "see `safactory audit --list-checkers`)",
    ),
]
JudgeTimeoutOption = Annotated[float, typer.Option(help="seconds an async checker may take")]


def audit_engine(checkers: str | None, judge_timeout: float) -> AuditEngine:
    """The chosen checkers, and the judge tier when ``SF_AUDIT_JUDGE_URL`` names one."""
    try:
        return configured_engine(checkers, judge_timeout)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _entries(path: Path, fmt: str, strict: bool) -> list[AuditRecord | SkippedRecord]:
    """The input's records in order; unreadable ones are reported (and stop a strict run,
    or any run where nothing at all could be read)."""
    try:
        entries = read_entries(path, fmt)
    except ImportFormatError as exc:
        raise _fail(str(exc)) from None
    skipped = [e for e in entries if isinstance(e, SkippedRecord)]
    if skipped and (strict or len(skipped) == len(entries)):
        raise _fail(skipped[0].reason if strict else "; ".join(e.reason for e in skipped))
    for entry in skipped:
        err.print(f"[yellow]skipped:[/yellow] {entry.reason}")
    if skipped:
        err.print(
            f"[yellow]{len(skipped)} of {len(entries)} records skipped[/yellow] (fix the "
            "fields named above; --strict stops at the first)"
        )
    return entries


StrictOption = Annotated[
    bool, typer.Option("--strict", help="stop at the first unreadable record, not skip it")
]


def list_checkers() -> None:
    """Print every available checker: name, kind, scope, risk types."""
    table = Table("checker", "kind", "scope", "risk types", "default", "what")
    defaults = set(registry.default_names())
    for name, factory in registry.available().items():
        cls = factory if isinstance(factory, type) else type(factory())
        table.add_row(
            name,
            cls.kind,
            cls.scope,
            ", ".join(cls.risk_types),
            "on" if name in defaults else "off",
            cls.description,
        )
    console.print(table)


def audit(
    path: Annotated[Path | None, typer.Argument(help="trace file, or a folder of them")] = None,
    fmt: FormatOption = "rjudge",
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="write one JSON line per record here (default: stdout)"),
    ] = None,
    checkers: CheckersOption = None,
    judge_timeout: JudgeTimeoutOption = 2.0,
    list_all: Annotated[
        bool, typer.Option("--list-checkers", help="list checkers and exit")
    ] = False,
    strict: StrictOption = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="per step where a checker fired: the deciding checkers, their evidence, "
            "harm / who asked / outcome, and the calibrated probability (in each line's "
            "'steps', and as text on stderr)",
        ),
    ] = False,
) -> None:
    """Audit recorded agent traces with the live engine.

    Writes {"id", "unsafe", "decision", "probability", "score", "risk_types",
    "first_unsafe_step"} per input record as it goes (id = the record's id, else file:line;
    always file:line for AgentDojo). decision is block or warn only where the checker's
    precision was measured (calibration), uncertain where something fired without it, else
    allow; probability is the calibrated chance the episode is unsafe. A record that cannot
    be read gets {"id", "unsafe": null, ..., "error"} and the rest are audited (--strict stops
    instead); Ctrl-C stops after the record in hand, keeping every line written.
    When the input carries labels, prints precision, recall, F1, accuracy and false-positive
    rate at the trajectory level, per group (R-Judge category, AgentDojo suite), per attack
    kind and overall.
    """
    if list_all:
        list_checkers()
        return
    if path is None:
        raise _fail("missing PATH: the trace file or folder to audit")
    engine = audit_engine(checkers, judge_timeout)
    try:
        entries = iter_entries(path, fmt)
    except ImportFormatError as exc:
        raise _fail(str(exc)) from None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
    sink = out.open("w", encoding="utf-8") if out else sys.stdout
    tally = LabelTally()
    audited = skipped = 0
    unread: list[str] = []
    try:
        with (
            stop_on_interrupt() as interrupted,
            asyncio.Runner() as runner,
            console.status("auditing") as status,
        ):
            for entry in entries:
                if isinstance(entry, SkippedRecord):
                    if strict:
                        raise _fail(entry.reason)
                    skipped += 1
                    if audited:
                        err.print(f"[yellow]skipped:[/yellow] {entry.reason}")
                    else:  # said once something is read; if nothing is, one error says it
                        unread.append(entry.reason)
                    line = skipped_line(entry)
                else:
                    for reason in unread:
                        err.print(f"[yellow]skipped:[/yellow] {reason}")
                    unread.clear()
                    result, audits = audit_record(runner, engine, entry)
                    tally.add(entry, result)
                    audited += 1
                    line = result.as_json()
                    if explain:
                        steps = explained(entry, audits)
                        line["steps"] = [e.as_json() for e in steps]
                        status.stop()
                        err.print(f"[bold]{entry.id}[/bold]: {result.decision}", markup=True)
                        for e in steps:
                            for text in e.lines():
                                err.print(text, markup=False, highlight=False)
                        status.start()
                sink.write(json.dumps(line) + "\n")
                sink.flush()
                status.update(f"audited {audited} records ({skipped} skipped)")
                if interrupted.is_set():
                    err.print(
                        f"[yellow]stopped (Ctrl-C) after {audited + skipped} records; "
                        f"their lines are kept{f' in {out}' if out else ''}[/yellow]"
                    )
                    raise typer.Exit(130)
    finally:
        if out:
            sink.close()
    if skipped and not audited:
        more = f" (and {len(unread) - 1} more records)" if len(unread) > 1 else ""
        raise _fail(f"no record could be read: {unread[0]}{more}")
    if skipped:
        err.print(
            f"[yellow]{skipped} of {audited + skipped} records skipped[/yellow] (fix the "
            "fields named above; --strict stops at the first)"
        )
    if out:
        err.print(f"wrote {audited + skipped} lines to {out}")
    by_group = tally.metrics()
    if by_group:
        table = Table(title="trajectory level (percent; FPR = flagged among safe)")
        for column in ("group", "n", "P", "R", "F1", "Acc", "FPR"):
            table.add_column(column, justify="left" if column == "group" else "right")
        for name, m in by_group.items():
            figures = (m.precision, m.recall, m.f1, m.accuracy, m.false_positive_rate)
            table.add_row(name, str(m.n), *(f"{x:.1f}" for x in figures))
        err.print(table)


def skipped_line(entry: SkippedRecord) -> dict[str, object]:
    """The audit line of a record that could not be read."""
    return {
        "id": entry.id,
        "unsafe": None,
        "decision": None,
        "probability": None,
        "score": None,
        "risk_types": [],
        "first_unsafe_step": None,
        "error": entry.reason,
    }


def import_traces(
    path: Annotated[Path, typer.Argument(help="trace file, or a folder of them")],
    fmt: FormatOption = "rjudge",
    strict: StrictOption = False,
) -> None:
    """Publish recorded traces as step events to the steps topic (replay through the
    live path: `safactory worker audit` then judges them like live agent steps)."""
    records = [e for e in _entries(path, fmt, strict) if isinstance(e, AuditRecord)]
    steps = list(iter_steps(records))

    async def publish() -> int:
        from ..infra.producer import EventProducer

        async with EventProducer(get_settings()) as producer:
            return len(await producer.publish_many(steps))

    try:
        sent = asyncio.run(publish())
    except Exception as exc:
        raise _fail(broker_failure(exc, get_settings().kafka_bootstrap)) from None
    console.print(
        f"published {sent} steps of {len(records)} episodes to {get_settings().topic('steps')}"
    )
