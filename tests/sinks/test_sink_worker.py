"""The LanceDB sink: exactly once per event id across duplicates, redelivery and restarts."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
from data_episodes import episode_events
from deliveries import deliveries

from safactory.schemas import Step
from safactory.sinks.lance import LanceSink, tag_versions


def _ids(sink: LanceSink, table: str) -> list[str]:
    return (
        sink.table(table)
        .search()
        .select(["event_id"])
        .limit(None)
        .to_arrow()["event_id"]
        .to_pylist()
    )


def test_duplicates_redelivery_and_republishing_store_each_event_once(tmp_path: Path) -> None:
    events = [e for n in range(6) for e in episode_events(n, steps=3)]
    batch = deliveries(events)
    sink = LanceSink(tmp_path / "db")
    sink.write_batch(batch[:40] + batch[10:20])  # duplicates inside one batch
    sink.write_batch(batch[30:])  # overlaps the first batch: redelivery
    assert sink.stats.duplicates_in_batch == 10
    restarted = LanceSink(tmp_path / "db")  # a new process: resume from stored offsets
    restarted.write_batch(batch)
    assert restarted.stats.skipped_below_offset == len(batch)
    assert restarted.stats.written == 0
    republished = deliveries(events[:12], start=1000)  # same events, new offsets
    restarted.write_batch(republished)
    assert restarted.stats.already_stored == 12
    for table, kind in (("steps", Step), ("verdicts", None), ("episodes", None)):
        ids = _ids(restarted, table)
        assert len(ids) == len(set(ids))
        if kind is Step:
            assert len(ids) == 18
    assert len(_ids(restarted, "verdicts")) == 6 * 4
    assert len(_ids(restarted, "episodes")) == 12
    stored_max: dict[tuple[str, int], int] = {}
    for d in batch:
        if isinstance(d.event, Step):
            stored_max[(d.topic, d.partition)] = d.offset
    assert restarted.stored_offsets("steps") == stored_max
    assert all(o >= 1000 for o in restarted.watermark("steps").values())


def test_indexes_maintenance_and_tagged_versions(tmp_path: Path) -> None:
    sink = LanceSink(tmp_path / "db")
    sink.write_batch(deliveries([e for n in range(4) for e in episode_events(n)]))
    made = sink.ensure_indexes()
    assert "steps.event_id:BTREE" in made and "steps.text:FTS" in made
    assert "verdicts.risk_type:BITMAP" in made
    assert sink.ensure_indexes() == []  # idempotent
    tagged = tag_versions(tmp_path / "db", "train-run-1", ["steps"])
    sink.write_batch(deliveries([e for n in range(4, 8) for e in episode_events(n)], start=100))
    sink.maintain()
    steps = sink.table("steps")
    assert steps.count_rows() == 24
    steps.checkout("train-run-1")
    assert steps.version == tagged["steps"] and steps.count_rows() == 12
    steps.checkout_latest()
    hits = steps.search("password", query_type="fts").select(["text"]).limit(50).to_arrow()
    assert hits.num_rows > 0
    assert all("password" in t for t in pc.utf8_lower(hits["text"]).to_pylist())


def test_a_sink_given_another_writers_partitions_rereads_what_it_wrote(tmp_path: Path) -> None:
    """Two sinks of one group write one database. The one that takes over a dead member's
    partitions gets again the records it wrote but never committed: after ``forget`` (the
    worker's reaction to an assignment) it stores none of them twice."""
    events = [e for n in range(6) for e in episode_events(n, steps=3)]
    batch = deliveries(events)
    survivor = LanceSink(tmp_path / "db")
    victim = LanceSink(tmp_path / "db")
    survivor.write_batch(batch[:5])  # both have read the tables' state by now
    victim.write_batch(batch[5:40])  # written, then the victim dies before its commit
    survivor.refresh()
    survivor.forget()
    survivor.write_batch(batch[5:])  # redelivered to the survivor, and the rest
    for table in ("steps", "verdicts", "episodes"):
        ids = _ids(survivor, table)
        assert len(ids) == len(set(ids)), table
    assert len(_ids(survivor, "steps")) == 18
    assert survivor.stats.skipped_below_offset == 35
