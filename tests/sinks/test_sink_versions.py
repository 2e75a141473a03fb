"""The sink worker keeps LanceDB small under a stream of small batches (issue #14, item 5):
records are gathered into few commits, offsets commit only after the write, and maintenance
compacts and drops old versions."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, Step
from safactory.sinks.lance import LanceSink
from safactory.sinks.options import SinkOptions
from safactory.sinks.worker import run_sink

pytestmark = pytest.mark.integration

RECORDS = 20_000
BATCH = 100


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


async def test_small_batches_make_few_versions_and_each_record_once(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    db = tmp_path / "db"
    steps = [
        Step(
            episode_id=f"ep-{i % 97}",
            step_index=i // 97,
            env="test",
            task_id="t",
            policy_version=0,
            action=Action(text=f"echo {i}"),
        )
        for i in range(RECORDS)
    ]
    options = SinkOptions(db_path=db, idle_timeout_s=4.0)
    sinking = asyncio.create_task(run_sink(topics, options))
    for start in range(0, RECORDS, BATCH):  # a stream of small batches
        await producer.publish_many(steps[start : start + BATCH])
        await asyncio.sleep(0.02)
    sink = await sinking
    table = sink.table("steps")
    assert table.count_rows() == RECORDS
    versions = len(table.list_versions())
    size = folder_bytes(db / "steps.lance")
    print(f"\nsteps table: {versions} versions, {size / 1e6:.1f} MB on disk")
    assert versions <= 40, versions  # one commit per gathered batch, not one per poll

    sink.maintain(timedelta(0))  # history dropped: what is left is the data itself
    compacted = folder_bytes(db / "steps.lance")
    assert len(table.list_versions()) <= 2
    assert size <= 4 * compacted, (size, compacted)  # history never dwarfs the data
    assert LanceSink(db).stored_offsets("steps")  # a restarted sink resumes from them
