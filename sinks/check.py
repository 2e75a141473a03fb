"""What a LanceDB folder holds, counted: rows and distinct event ids per table, and the
trajectories a query finds (``safactory demo`` checks its run's sink with it)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..schemas import Severity
from .query import QueryError, Selection, open_table, run_query


def row_count(db: Path, table: str) -> int:
    """Rows of ``table`` in ``db`` (0: no such table yet)."""
    try:
        return int(open_table(db, table).count_rows())
    except (QueryError, ValueError, OSError):
        return 0


def stored_counts(db: Path, tables: Iterable[str]) -> dict[str, dict[str, int]]:
    """Rows and distinct event ids of each of ``tables``, and the rows of trajectories with a
    high ``destructive_operation`` verdict (``trajectories_with_destructive_verdict``)."""
    out = {}
    for table in tables:
        try:
            ids = open_table(db, table).search().select(["event_id"]).limit(None).to_arrow()
        except QueryError:
            out[table] = {"rows": 0, "distinct": 0}
            continue
        column = ids["event_id"].to_pylist()
        out[table] = {"rows": len(column), "distinct": len(set(column))}
    risky = run_query(
        db,
        "trajectories",
        Selection(risk_type="destructive_operation", min_severity=Severity.HIGH),
        limit=100_000,
        columns=["event_id"],
    )
    out["trajectories_with_destructive_verdict"] = {"rows": risky.num_rows}
    return out
