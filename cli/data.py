"""Data-platform commands: ``query`` and ``export`` (the sink worker: :mod:`.worker`; the
``--db`` option: :mod:`.options`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .errors import console, failing
from .options import DbOption, lance_location

EnvOpt = Annotated[str | None, typer.Option(help="only this environment")]
TaskOpt = Annotated[str | None, typer.Option(help="only this task id")]
RiskOpt = Annotated[str | None, typer.Option(help="only data with a verdict of this risk type")]
SeverityOpt = Annotated[
    str | None, typer.Option(help="only data with a verdict at least this severe (low..critical)")
]
VersionOpt = Annotated[int | None, typer.Option(help="only this policy version")]
MinVersionOpt = Annotated[int | None, typer.Option(help="only policy versions >= this")]
SinceOpt = Annotated[str | None, typer.Option(help="produced at or after (unix s or ISO 8601)")]
UntilOpt = Annotated[str | None, typer.Option(help="produced before (unix s or ISO 8601)")]


def query(
    table: Annotated[
        str, typer.Option(help="steps, episodes, verdicts, trajectories, scores or skills")
    ] = "steps",
    db: DbOption = None,
    env: EnvOpt = None,
    task: TaskOpt = None,
    risk_type: RiskOpt = None,
    severity: SeverityOpt = None,
    policy_version: VersionOpt = None,
    min_policy_version: MinVersionOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    like: Annotated[
        str | None, typer.Option(help="semantic search: rows nearest in meaning to this text")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="most rows to return (at least 1)")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="full stored events, one per line")] = (
        False
    ),
) -> None:
    """Look up stored data by filters or by meaning (--like).

    Filters: env, task, risk type, minimum severity, policy version, time range. Prints a
    table, or the stored events as JSON lines (--json).
    """
    import json

    from rich.table import Table

    from ..infra.embedding import MiniLM
    from ..sinks.query import QueryError, run_query, selection, shown_rows, stored_events

    with failing(QueryError):
        sel = selection(
            env, task, risk_type, severity, policy_version, min_policy_version, since, until
        )
        embedder = MiniLM() if like is not None and table in ("steps", "skills") else None
        rows = run_query(lance_location(db), table, sel, like=like, embedder=embedder, limit=limit)
    if as_json:
        for record in stored_events(rows):
            print(json.dumps(record, ensure_ascii=False))
        return
    columns, cells = shown_rows(table, rows)
    out = Table(*columns, title=f"{table}: {rows.num_rows} rows")
    for row in cells:
        out.add_row(*row)
    console.print(out)


def export(
    out: Annotated[
        Path, typer.Option(help="output file (.jsonl, .parquet; otel: .json or .jsonl)")
    ],
    db: DbOption = None,
    fmt: Annotated[
        str, typer.Option("--format", help="jsonl, parquet or otel (OpenTelemetry GenAI spans)")
    ] = "jsonl",
    env: EnvOpt = None,
    task: TaskOpt = None,
    risk_type: RiskOpt = None,
    severity: SeverityOpt = None,
    policy_version: VersionOpt = None,
    min_policy_version: MinVersionOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    min_reward: Annotated[float | None, typer.Option(help="only trajectories rewarded >= this")] = (
        None
    ),
    tag: Annotated[
        str | None, typer.Option(help="tag the LanceDB version read, so cleanup keeps it")
    ] = None,
) -> None:
    """Export trajectories for fine-tuning (OpenAI chat format, JSONL or Parquet), or as
    OpenTelemetry GenAI spans with verdicts as span events (--format otel, OTLP/JSON).

    A dataset card is written beside the file: counts, sources, selection rule, LanceDB
    version (and tag, with --tag, so cleanup keeps that version).
    """
    from ..sinks.export import card_path, check_output, export_trajectories
    from ..sinks.query import QueryError, selection

    with failing(QueryError):
        check_output(out, fmt, min_reward)
        sel = selection(
            env, task, risk_type, severity, policy_version, min_policy_version, since, until
        )
        where = lance_location(db)
        facts = export_trajectories(where, out, sel, fmt=fmt, min_reward=min_reward, tag=tag)  # type: ignore[arg-type]
    spans = f" as {facts['spans']} spans" if fmt == "otel" else ""
    console.print(f"wrote {facts['records']} trajectories{spans} to {out}; card {card_path(out)}")
