"""CLI commands of the auditor: batch audit and import to Kafka (the live worker:
:mod:`.worker`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..infra.terminal import visible
from ..tools.importers import (
    FORMATS,
    ImportFormatError,
    detect_format,
    iter_entries,
    iter_steps,
    readable_records,
)
from .errors import console, err, fail, failing, get_settings
from .options import CheckersOption, DbOption, JudgeTimeoutOption, lance_location

FormatOption = Annotated[
    str | None,
    typer.Option(
        "--format",
        "-f",
        help=f"input format: {' | '.join(FORMATS)} (default: told from the first record; fields "
        "and examples: docs/AUDIT_FORMATS.md)",
    ),
]
StrictOption = Annotated[
    bool, typer.Option("--strict", help="stop at the first unreadable record, not skip it")
]


def _format(path: Path, fmt: str | None) -> str:
    """``--format``, else the format ``path``'s first record shows (said on stderr)."""
    if fmt is None:
        with failing(ImportFormatError):
            fmt = detect_format(path)
        err.print(f"format: {fmt} (told from the first record; --format to choose)")
    return fmt


def _say_skipped(reasons: list[str], skipped: int = 0, total: int = 0) -> None:
    """Each reason a record was skipped, then (``skipped``) how many of ``total`` were."""
    for reason in reasons:
        err.print(f"skipped: {visible(reason)}", style="yellow", markup=False, highlight=False)
    if skipped:
        err.print(
            f"[yellow]{skipped} of {total} records skipped[/yellow] (fix the "
            "fields named above; --strict stops at the first)"
        )


def audit(
    path: Annotated[Path | None, typer.Argument(help="trace file, or a folder of them")] = None,
    fmt: FormatOption = None,
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
    labels: Annotated[
        bool,
        typer.Option("--labels/--no-labels", help="use and keep labels in --db (docs/AUDIT.md)"),
    ] = True,
    db: DbOption = None,
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
    from ..streams.audit import registry  # the engine loads when a command runs, not for --help
    from ..streams.audit.engine import configured_engine
    from ..tools.batch import BatchAudit, stop_on_interrupt

    if list_all:
        table = Table("checker", "kind", "scope", "risk types", "default", "what")
        for row in registry.catalogue():
            table.add_row(*row)
        console.print(table)
        return
    if path is None:
        raise fail("missing PATH: the trace file or folder to audit")
    fmt = _format(path, fmt)  # before any model loads
    with failing(ValueError):  # the chosen checkers, and the judge tier SF_AUDIT_JUDGE_URL names
        engine = configured_engine(checkers, judge_timeout)
    with failing(ImportFormatError):
        entries = iter_entries(path, fmt)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
    sink = out.open("w", encoding="utf-8") if out else sys.stdout
    batch = BatchAudit(engine, explain=explain, strict=strict)
    if labels:
        from ..tools.batch import LabelledAudit
        from ..tools.casebook import Casebook

        batch.labels = LabelledAudit(Casebook(lance_location(db)), str(path))
    try:
        with (
            failing(ImportFormatError),  # --strict: the first record that cannot be read
            stop_on_interrupt() as interrupted,
            asyncio.Runner() as runner,
            console.status("auditing") as status,
        ):
            for done in batch.lines(runner, entries):
                _say_skipped(done.said)
                if done.record and done.result and done.steps is not None:
                    status.stop()
                    err.print(f"{visible(done.record.id)}: {done.result.decision}", markup=False)
                    for e in done.steps:
                        for text in e.lines():
                            err.print(visible(text), markup=False, highlight=False)
                    status.start()
                sink.write(json.dumps(done.line) + "\n")
                sink.flush()
                status.update(f"audited {batch.audited} records ({batch.skipped} skipped)")
                if interrupted.is_set():
                    err.print(
                        f"[yellow]stopped (Ctrl-C) after {batch.audited + batch.skipped} "
                        f"records; their lines are kept{f' in {out}' if out else ''}[/yellow]"
                    )
                    raise typer.Exit(130)
    finally:
        if batch.labels is not None:
            batch.labels.flush()
        if out:
            sink.close()
    if message := batch.nothing_read():
        raise fail(message)
    _say_skipped([], batch.skipped, batch.audited + batch.skipped)
    if out:
        err.print(f"wrote {batch.audited + batch.skipped} lines to {out}")
    if batch.tally.groups:
        err.print(batch.tally.table())


def import_traces(
    path: Annotated[Path, typer.Argument(help="trace file, or a folder of them")],
    fmt: FormatOption = None,
    strict: StrictOption = False,
) -> None:
    """Publish recorded traces as step events to the steps topic (replay through the
    live path: `safactory worker audit` then judges them like live agent steps)."""
    with failing(ImportFormatError):
        records, skipped = readable_records(path, _format(path, fmt), strict=strict)
    _say_skipped([e.reason for e in skipped], len(skipped), len(records) + len(skipped))
    steps = list(iter_steps(records))

    from ..infra.producer import publish_all

    with failing(broker=Exception):
        sent = asyncio.run(publish_all(get_settings(), steps))
    console.print(
        f"published {sent} steps of {len(records)} episodes to {get_settings().topic('steps')}"
    )
