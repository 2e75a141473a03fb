"""What a LanceDB folder holds, counted: rows, distinct ids, the risky trajectories."""

from __future__ import annotations

from pathlib import Path

from example_events import example_events

from safactory.infra.consumer import Delivery
from safactory.sinks.check import row_count, stored_counts
from safactory.sinks.lance import LanceSink


def test_rows_and_distinct_ids_per_table(tmp_path: Path) -> None:
    db = tmp_path / "lancedb"
    assert row_count(db, "steps") == 0  # nothing written yet
    events = [e for e in example_events() if e.TOPIC in ("steps", "trajectories", "verdicts")]
    LanceSink(db).write_batch(
        Delivery(e, f"sf.{e.TOPIC}", 0, n, e.key().encode(), []) for n, e in enumerate(events)
    )
    assert row_count(db, "steps") == 1
    counts = stored_counts(db, ("steps", "trajectories", "episodes"))
    assert counts["steps"] == {"rows": 1, "distinct": 1}
    assert counts["episodes"] == {"rows": 0, "distinct": 0}
    assert counts["trajectories_with_destructive_verdict"] == {"rows": 0}
