"""Kill the sink process (SIGKILL) mid-stream, restart it: every event id is stored once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lancedb
import pytest
from data_episodes import episode_events

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer

pytestmark = pytest.mark.integration


def _sink_process(settings: Settings, db: Path, idle_s: float = 4) -> subprocess.Popen[bytes]:
    env = os.environ | {
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": settings.topic_prefix,
    }
    cmd = [
        sys.executable,
        "-m",
        "safactory.cli.main",
        "worker",
        "sink",
        "--db",
        str(db),
        "--no-embed",
        "--max-records",
        "40",
        "--idle-exit",
        str(idle_s),
        "--group",
        "crash-sink",
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _count(db: Path, table: str) -> int:
    conn = lancedb.connect(str(db))
    return conn.open_table(table).count_rows() if table in conn.list_tables().tables else 0


def _ids(db: Path, table: str) -> list[str]:
    t = lancedb.connect(str(db)).open_table(table)
    return t.search().select(["event_id"]).limit(None).to_arrow()["event_id"].to_pylist()


def _assert_each_event_once(db: Path, events: list) -> None:
    for table in ("steps", "verdicts", "episodes"):
        ids = _ids(db, table)
        expected = sum(1 for e in events if e.TOPIC == table)
        assert len(ids) == len(set(ids)) == expected, table


async def test_sigkill_mid_stream_then_restart_stores_every_event_once(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    events = [e for n in range(40) for e in episode_events(n, steps=12)]
    await producer.publish_many(events)
    await producer.publish_many(events[::7])  # republished: same ids at new offsets
    steps = sum(1 for e in events if e.TOPIC == "steps")
    db = tmp_path / "db"
    mid_stream_kills = 0
    for threshold in (steps // 5, steps // 2):
        proc = _sink_process(topics, db)
        deadline = time.monotonic() + 90
        while _count(db, "steps") < threshold and proc.poll() is None:
            assert time.monotonic() < deadline, "sink made no progress"
            await asyncio.sleep(0.05)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            mid_stream_kills += _count(db, "steps") < steps  # it died with work left
        else:
            proc.wait(timeout=30)
    assert mid_stream_kills >= 1, "no kill landed while the sink still had work left"
    final = _sink_process(topics, db)
    out, _ = final.communicate(timeout=180)
    assert final.returncode == 0, out.decode()[-2000:]
    _assert_each_event_once(db, events)
    assert set(_ids(db, "steps")) == {e.event_id for e in events if e.TOPIC == "steps"}


async def test_two_sinks_share_one_database_and_one_is_killed_mid_stream(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    """Two sinks of one group write one database; one is SIGKILLed mid-stream, the other
    takes its partitions over and, having re-read what the tables hold, stores every event
    once (records the dead one wrote but never committed come to it again)."""
    events = [e for n in range(60) for e in episode_events(n, steps=12)]
    await producer.publish_many(events)
    await producer.publish_many(events[::7])  # republished: same ids at new offsets
    steps = sum(1 for e in events if e.TOPIC == "steps")
    db = tmp_path / "db"
    survivor, victim = _sink_process(topics, db, 25), _sink_process(topics, db, 25)
    deadline = time.monotonic() + 120
    while _count(db, "steps") < steps // 3:
        assert time.monotonic() < deadline and victim.poll() is None, "sinks made no progress"
        await asyncio.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert _count(db, "steps") < steps, "the kill came after all the work was done"
    out, _ = survivor.communicate(timeout=240)
    assert survivor.returncode == 0, out.decode()[-2000:]
    _assert_each_event_once(db, events)
