"""``safactory replay sink``: a dropped LanceDB table rebuilt from the log, row for row."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra.config import Settings, get_settings
from safactory.infra.producer import EventProducer
from safactory.schemas import EpisodeEnded, EpisodeStarted, Outcome, Step
from safactory.sinks.lance import open_db
from safactory.sinks.options import SinkOptions
from safactory.sinks.worker import run_sink

runner = CliRunner()


def _events() -> list[Step | EpisodeStarted | EpisodeEnded]:
    events: list[Step | EpisodeStarted | EpisodeEnded] = []
    for e in range(6):
        episode = f"ep-{e}"
        events.append(
            EpisodeStarted(
                episode_id=episode,
                task_id=f"t{e}",
                env="os",
                policy_name="careful",
                policy_version=0,
                seed=e,
            )
        )
        events += [
            Step(
                episode_id=episode,
                step_index=i,
                env="os",
                task_id=f"t{e}",
                policy_version=0,
                observation=f"episode {e} step {i}",
                tool_result="ok",
            )
            for i in range(5)
        ]
        events.append(
            EpisodeEnded(
                episode_id=episode,
                task_id=f"t{e}",
                env="os",
                num_steps=5,
                outcome=Outcome.SUCCESS,
                task_reward=1.0,
            )
        )
    return events


async def _publish_and_sink(settings: Settings, db: Path) -> None:
    async with EventProducer(settings) as producer:
        await producer.publish_many(_events())
        # the same step again at a new offset: the live sink stores it once, so must a rebuild
        await producer.publish(_events()[1])
    options = SinkOptions(db_path=db, group_id="sink-under-test", gather_s=0.2, idle_timeout_s=3.0)
    await run_sink(settings, options)


def _rows(db: Path, table: str) -> list[dict[str, object]]:
    data: pa.Table = open_db(db).open_table(table).to_arrow().drop_columns(["ingested_at"])
    return sorted(data.to_pylist(), key=lambda row: str(row["event_id"]))


@pytest.mark.integration
def test_a_dropped_table_is_rebuilt_with_the_same_rows(
    topics: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "lancedb"
    asyncio.run(_publish_and_sink(topics, db))
    steps, episodes = _rows(db, "steps"), _rows(db, "episodes")
    assert len(steps) == 30 and len(episodes) == 12
    open_db(db).drop_table("steps")
    assert "steps" not in open_db(db).list_tables().tables

    monkeypatch.setenv("SF_TOPIC_PREFIX", topics.topic_prefix)
    monkeypatch.setenv("SF_KAFKA_BOOTSTRAP", topics.kafka_bootstrap)
    get_settings.cache_clear()
    try:
        result = runner.invoke(
            app,
            ["replay", "sink", "--db", str(db), "--table", "steps", "--table", "episodes"],
            terminal_width=200,
        )
    finally:
        get_settings.cache_clear()

    assert result.exit_code == 0, result.output
    assert _rows(db, "steps") == steps  # every column but ingested_at, source offsets included
    assert _rows(db, "episodes") == episodes  # intact: nothing written twice
    assert "31" in result.output and "30" in result.output  # read 31 records, wrote 30 rows
