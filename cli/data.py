"""Data-platform commands: ``query`` and ``export`` (the sink worker: :mod:`.worker`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from .errors import fail as _fail
from .errors import get_settings

if TYPE_CHECKING:  # lancedb loads only when a command needs it
    from ..sinks.location import LanceLocation
    from ..sinks.query import Selection

console = Console()

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        show_default=False,
        help="LanceDB database: a folder or s3://bucket/prefix (default: SF_LANCE_URI, or "
        "lance_uri in the config, else ./lancedb; storage options: SF_LANCE_STORAGE, AWS_*)",
    ),
]


def lance_location(db: str | None) -> LanceLocation:
    """``--db``, else the configured ``lance_uri``, with the configured storage options.
    ``SF_LANCEDB`` (the old name) fails instead of being ignored."""
    import os

    from ..sinks.location import LanceLocation

    if "SF_LANCEDB" in os.environ:
        raise _fail(
            "SF_LANCEDB was renamed SF_LANCE_URI (a folder or s3://bucket/prefix); rename it"
        )
    return LanceLocation.configured(get_settings(), db)


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


def _selection(
    env: str | None,
    task: str | None,
    risk_type: str | None,
    severity: str | None,
    policy_version: int | None,
    min_policy_version: int | None,
    since: str | None,
    until: str | None,
) -> Selection:
    from ..schemas import Severity
    from ..sinks.query import Selection

    min_severity = None
    if severity is not None:
        try:
            min_severity = Severity(severity.lower())
        except ValueError:
            choices = ", ".join(s.value for s in Severity)
            raise _fail(f"--severity {severity!r}: choose one of {choices}") from None
    start, end = _time("--since", since), _time("--until", until)
    return Selection(
        env=env,
        task=task,
        risk_type=risk_type,
        min_severity=min_severity,
        policy_version=policy_version,
        min_policy_version=min_policy_version,
        since=start,
        until=end,
    )


def _time(option: str, text: str | None) -> float | None:
    """Unix seconds of a ``--since``/``--until`` value; a bad one fails naming the option."""
    from ..sinks.query import QueryError, parse_time

    if not text:
        return None
    try:
        moment = parse_time(text)
    except QueryError as exc:
        raise _fail(f"{option}: {exc}") from None
    except (OverflowError, ValueError, OSError):  # a date outside what the clock can convert
        moment = math.nan
    if not math.isfinite(moment):
        raise _fail(
            f"{option} {text!r}: give a finite time, e.g. 1700000000 or 2026-11-30T12:00:00Z"
        )
    return moment


SHOWN = {
    "steps": ["episode_id", "step_index", "env", "task_id", "policy_version", "text"],
    "episodes": ["episode_id", "kind", "env", "task_id", "outcome", "task_reward", "unsafe"],
    "verdicts": ["episode_id", "step_index", "checker", "risk_type", "severity", "decision"],
    "trajectories": ["episode_id", "group_id", "env", "outcome", "reward", "policy_version"],
    "scores": ["episode_id", "scorer", "composite"],
    "skills": ["skill_id", "title", "env", "text"],
}


TableOpt = Annotated[
    str, typer.Option(help="steps, episodes, verdicts, trajectories, scores or skills")
]


def query(
    table: TableOpt = "steps",
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

    from ..sinks.query import QueryError, run_query

    sel = _selection(
        env, task, risk_type, severity, policy_version, min_policy_version, since, until
    )
    embedder = None
    if like is not None and table in ("steps", "skills"):
        from ..infra.embedding import MiniLM as MiniLMEmbedder

        embedder = MiniLMEmbedder()
    try:
        rows = run_query(lance_location(db), table, sel, like=like, embedder=embedder, limit=limit)
    except QueryError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        for row in rows.to_pylist():
            record = json.loads(row["payload"])
            if "_distance" in row:
                record["_distance"] = row["_distance"]
            print(json.dumps(record, ensure_ascii=False))
        return
    shown = SHOWN[table] + [c for c in ("_distance", "_score") if c in rows.column_names]
    out = Table(*shown, title=f"{table}: {rows.num_rows} rows")
    for row in rows.to_pylist():
        out.add_row(*(_cell(row.get(c)) for c in shown))
    console.print(out)


def _cell(value: object) -> str:
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return text.replace("\n", " ")[:80]


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
    from ..sinks.export import card_path, export_trajectories
    from ..sinks.query import QueryError

    if fmt not in ("jsonl", "parquet", "otel"):
        raise _fail(f"--format {fmt!r}: choose jsonl, parquet or otel")
    if fmt == "otel" and out.suffix not in (".json", ".jsonl"):
        raise _fail(
            f"--out {out}: OTLP/JSON goes to a .json file (one request) or .jsonl (one a line)"
        )
    if fmt != "otel" and out.suffix in (".jsonl", ".parquet") and out.suffix != f".{fmt}":
        raise _fail(
            f"--out {out} ends in {out.suffix} but --format is {fmt}: pass --format "
            f"{out.suffix[1:]} or an --out ending in .{fmt}"
        )
    if min_reward is not None and not math.isfinite(min_reward):
        raise _fail(f"--min-reward {min_reward}: give a finite number, e.g. --min-reward 0.5")
    sel = _selection(
        env, task, risk_type, severity, policy_version, min_policy_version, since, until
    )
    where = lance_location(db)
    try:
        facts = export_trajectories(where, out, sel, fmt=fmt, min_reward=min_reward, tag=tag)  # type: ignore[arg-type]
    except QueryError as exc:
        raise _fail(str(exc)) from None
    spans = f" as {facts['spans']} spans" if fmt == "otel" else ""
    console.print(f"wrote {facts['records']} trajectories{spans} to {out}; card {card_path(out)}")
