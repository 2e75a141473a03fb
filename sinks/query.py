"""Reading the stored data back: filtered lookups and semantic (``--like``) search."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import lancedb
import pyarrow as pa

from ..infra.embedding import TextEmbedder as Embedder
from ..schemas import Severity
from .lance import sql_quote
from .location import Db, DbUnavailable, location, open_db

TABLES = ("steps", "episodes", "verdicts", "trajectories", "scores", "skills")
SHOWN = {
    "steps": ["episode_id", "step_index", "env", "task_id", "policy_version", "text"],
    "episodes": ["episode_id", "kind", "env", "task_id", "outcome", "task_reward", "unsafe"],
    "verdicts": ["episode_id", "step_index", "checker", "risk_type", "severity", "decision"],
    "trajectories": ["episode_id", "group_id", "env", "outcome", "reward", "policy_version"],
    "scores": ["episode_id", "scorer", "composite"],
    "skills": ["skill_id", "title", "env", "text"],
}
"""The columns ``safactory query`` shows of a table's rows (then a search's distance, score)."""


class QueryError(ValueError):
    """A query that cannot run; the message names the option and the fix."""


@dataclass(frozen=True)
class Selection:
    """Filters shared by ``query`` and ``export``. ``None`` means no filter."""

    env: str | None = None
    task: str | None = None
    risk_type: str | None = None
    min_severity: Severity | None = None
    policy_version: int | None = None
    min_policy_version: int | None = None
    since: float | None = None
    until: float | None = None

    def describe(self) -> str:
        """The selection as a readable rule (for dataset cards)."""
        parts = [f"{k}={v}" for k, v in self.__dict__.items() if v is not None]
        return " AND ".join(parts) or "everything"


def parse_time(text: str) -> float:
    """Unix seconds from ``1700000000`` or an ISO time ``2026-11-30T00:00:00+00:00``."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise QueryError(
            f"time {text!r} is neither unix seconds nor ISO 8601 (e.g. 2026-11-30T12:00:00Z)"
        ) from None
    return moment.timestamp()


def selection(
    env: str | None,
    task: str | None,
    risk_type: str | None,
    severity: str | None,
    policy_version: int | None,
    min_policy_version: int | None,
    since: str | None,
    until: str | None,
) -> Selection:
    """The :class:`Selection` a command's options ask for (severity and times as typed); a
    bad severity or time is a :class:`QueryError` naming its option."""
    min_severity = None
    if severity is not None:
        try:
            min_severity = Severity(severity.lower())
        except ValueError:
            choices = ", ".join(s.value for s in Severity)
            raise QueryError(f"--severity {severity!r}: choose one of {choices}") from None
    return Selection(
        env=env,
        task=task,
        risk_type=risk_type,
        min_severity=min_severity,
        policy_version=policy_version,
        min_policy_version=min_policy_version,
        since=_option_time("--since", since),
        until=_option_time("--until", until),
    )


def _option_time(option: str, text: str | None) -> float | None:
    """Unix seconds of a ``--since``/``--until`` value; a bad one fails naming the option."""
    if not text:
        return None
    try:
        moment = parse_time(text)
    except QueryError as exc:
        raise QueryError(f"{option}: {exc}") from None
    except (OverflowError, ValueError, OSError):  # a date outside what the clock can convert
        moment = math.nan
    if not math.isfinite(moment):
        raise QueryError(
            f"{option} {text!r}: give a finite time, e.g. 1700000000 or 2026-11-30T12:00:00Z"
        )
    return moment


def where_clause(db_path: Db, table: str, sel: Selection) -> str | None:
    """SQL filter for ``table``; risk type and severity go through the verdicts table."""
    clauses = []
    if sel.env is not None:
        clauses.append(f"env = {sql_quote(sel.env)}")
    if sel.task is not None:
        clauses.append(f"task_id = {sql_quote(sel.task)}")
    if sel.policy_version is not None:
        clauses.append(f"policy_version = {int(sel.policy_version)}")
    if sel.min_policy_version is not None:
        clauses.append(f"policy_version >= {int(sel.min_policy_version)}")
    if sel.since is not None:
        clauses.append(f"produced_at >= {float(sel.since)!r}")
    if sel.until is not None:
        clauses.append(f"produced_at < {float(sel.until)!r}")
    verdict = []
    if sel.risk_type is not None:
        verdict.append(f"risk_type = {sql_quote(sel.risk_type)}")
    if sel.min_severity is not None:
        verdict.append(f"severity_rank >= {sel.min_severity.rank}")
    if verdict and table == "verdicts":
        clauses += verdict
    elif verdict:
        clauses.append(_matching_verdicts(db_path, table, " AND ".join(verdict)))
    return " AND ".join(clauses) or None


def _matching_verdicts(db_path: Db, table: str, where: str) -> str:
    verdicts = open_table(db_path, "verdicts")
    column, key = ("episode_id", "episode_id")
    if table == "steps":
        column, key = "source_event_id", "event_id"
    found = verdicts.search().where(where).select([column]).limit(None).to_arrow()
    values = sorted(set(found[column].to_pylist()))
    if not values:
        return "false"
    return f"{key} IN ({', '.join(sql_quote(v) for v in values)})"


def open_table(db_path: Db, table: str) -> lancedb.table.Table:
    """A table of an existing database; a missing folder is an error, never created (an
    object-store prefix holds no folder: there a missing table says it)."""
    if table not in TABLES:
        raise QueryError(f"--table {table!r}: choose one of {', '.join(TABLES)}")
    where = location(db_path)
    if not where.remote and not os.path.isdir(where.uri):
        raise QueryError(
            f"--db {where.uri}: no LanceDB database there; point --db (or SF_LANCE_URI) at the "
            "folder or s3:// URI `safactory worker sink --db` writes"
        )
    try:
        db = open_db(where)
    except DbUnavailable as exc:
        raise QueryError(str(exc)) from None
    if table not in db.list_tables().tables:
        raise QueryError(
            f"{db_path}: table {table!r} does not exist yet; run `safactory worker sink` first"
        )
    return db.open_table(table)


def run_query(
    db_path: Db,
    table: str,
    sel: Selection,
    *,
    like: str | None = None,
    embedder: Embedder | None = None,
    limit: int = 20,
    columns: list[str] | None = None,
) -> pa.Table:
    """Rows of ``table`` matching ``sel``; with ``like``, nearest by meaning first
    (``_distance``), by MiniLM vectors where the table has them, else full-text."""
    target = open_table(db_path, table)
    where = where_clause(db_path, table, sel)
    if like is None:
        query = target.search()
    elif "vector" in target.schema.names:
        if embedder is None:
            raise QueryError("--like on a table with vectors needs the MiniLM embedder")
        query = target.search(embedder.embed([like])[0], vector_column_name="vector")
        query = query.distance_type("cosine")
    elif "text" in target.schema.names:
        query = target.search(like, query_type="fts")
    else:
        raise QueryError(f"--like: table {table!r} has no text to search; use steps or skills")
    if where:
        query = query.where(where, prefilter=True)
    if columns:
        query = query.select([c for c in columns if c in target.schema.names])
    return query.limit(limit).to_arrow()


def shown_rows(table: str, rows: pa.Table) -> tuple[list[str], list[list[str]]]:
    """The columns ``rows`` of ``table`` are shown with (:data:`SHOWN`, then a search's) and
    each row's cells: one line, at most 80 characters, floats to 4 significant digits."""
    columns = SHOWN[table] + [c for c in ("_distance", "_score") if c in rows.column_names]
    return columns, [[_cell(row.get(c)) for c in columns] for row in rows.to_pylist()]


def _cell(value: object) -> str:
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return text.replace("\n", " ")[:80]


def stored_events(rows: pa.Table) -> Iterator[dict]:
    """Each row's whole stored event (its ``payload``), with a search's ``_distance``."""
    for row in rows.to_pylist():
        record = json.loads(row["payload"])
        if "_distance" in row:
            record["_distance"] = row["_distance"]
        yield record
