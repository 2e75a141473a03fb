"""The demo keeps the latest runs' topics and folders and deletes older ones."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from safactory.infra.config import Settings
from safactory.infra.topics import admin_client, create_topics
from safactory.streams.evaluation.loop import prune_runs

pytestmark = pytest.mark.integration


async def _topics(settings: Settings) -> set[str]:
    admin = admin_client(settings)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def test_older_runs_lose_their_topics_and_folders(kafka: str, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    runs = [f"demo-{tag}{n}" for n in range(3)]  # oldest first
    for age, run in enumerate(reversed(runs)):
        settings = Settings(kafka_bootstrap=kafka, topic_prefix=f"{run}.")
        await create_topics(settings)
        folder = tmp_path / "demo" / run
        folder.mkdir(parents=True)
        os.utime(folder, (1e9 - age * 100, 1e9 - age * 100))
    base = Settings(kafka_bootstrap=kafka, home=tmp_path)
    for _ in range(50):  # new topics reach the metadata a broker lists a moment later
        if {f"{run}.steps" for run in runs} <= await _topics(base):
            break
        await asyncio.sleep(0.2)
    removed = await asyncio.to_thread(prune_runs, base, 1)
    assert set(runs[:2]) <= set(removed) and runs[2] not in removed
    for _ in range(50):  # deletion reaches the broker's metadata a moment later
        left = await _topics(base)
        if not [t for t in left if t.startswith((f"{runs[0]}.", f"{runs[1]}."))]:
            break
        await asyncio.sleep(0.2)
    assert not [t for t in left if t.startswith((f"{runs[0]}.", f"{runs[1]}."))]
    assert f"{runs[2]}.steps" in left
    assert sorted(p.name for p in (tmp_path / "demo").iterdir()) == [runs[2]]
