"""``safactory replay run``: past unsafe episodes re-run on a real simulation worker."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from safactory.agents.tasks import suite_tasks
from safactory.agents.tracker import EpisodeTracker
from safactory.cli.main import app
from safactory.infra.config import Settings, get_settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import describe_topics
from safactory.schemas import AttackPlan, Task, codec
from safactory.streams.replay import read_window

runner = CliRunner()
GROUP = "sim-under-test"


def _worker(settings: Settings, log: Path, policy: str, version: int) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        SF_TOPIC_PREFIX=settings.topic_prefix,
        SF_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        OMP_NUM_THREADS="1",
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "safactory.cli.main",
            "simulate",
            "worker",
            "--policy",
            policy,
            "--policy-version",
            str(version),
            "--group",
            GROUP,
            "--concurrency",
            "3",
            "--max-staleness",
            "1000",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


async def _topics_visible(settings: Settings) -> None:
    """Wait until the cluster lists the test's topics (a loaded broker lags a moment)."""
    for _ in range(100):
        if all(row["exists"] for row in await describe_topics(settings)):
            return
        await asyncio.sleep(0.2)


async def _originals(settings: Settings, log: Path) -> list[Task]:
    """Three safety tasks run by a reckless worker at version 0 (one with an attack plan)."""
    tasks = suite_tasks("embodied", 3, group_id="orig", seed=7, kinds=("safety",))
    plan = AttackPlan(injector="misleading", params={})
    tasks[0] = tasks[0].model_copy(update={"attack": plan})
    tracker = EpisodeTracker(settings, "orig")
    await _topics_visible(settings)
    await tracker.start()
    worker = _worker(settings, log, "reckless", 0)
    try:
        async with EventProducer(settings) as producer:
            await producer.publish_many(tasks)
        async with asyncio.timeout(40):
            while len(tracker.ended) < 3:
                await tracker.poll()
    finally:
        _stop(worker)
        await tracker.stop()
    assert all(e.safety is not None and e.safety.unsafe for e in tracker.ended)
    return tasks


async def _tasks(settings: Settings) -> list[Task]:
    out = []
    async for batch in read_window(settings, settings.topic("tasks")):
        out += [codec.decode(r.value, r.headers) for r in batch]
    return out  # type: ignore[return-value]


@pytest.mark.integration
def test_unsafe_episodes_rerun_on_the_fixed_policy_compare_before_and_after(
    topics: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    originals = asyncio.run(_originals(topics, tmp_path / "reckless.log"))
    fixed = _worker(topics, tmp_path / "careful.log", "careful", 1)
    out = tmp_path / "run.json"
    monkeypatch.setenv("SF_TOPIC_PREFIX", topics.topic_prefix)
    monkeypatch.setenv("SF_KAFKA_BOOTSTRAP", topics.kafka_bootstrap)
    get_settings.cache_clear()
    try:
        result = runner.invoke(
            app,
            [
                "replay",
                "run",
                "--unsafe",
                "--policy-version",
                "1",
                "--checkers",
                "harm.beyond_scope",
                "--replay-id",
                "replay-fix",
                "--timeout",
                "40",
                "--out",
                str(out),
            ],
            terminal_width=200,
        )
    finally:
        get_settings.cache_clear()
        _stop(fixed)
    assert result.exit_code == 0, result.output + (tmp_path / "careful.log").read_text()
    report = json.loads(out.read_text())
    assert report["episodes"] == 3 and report["versions_run"] == [1]
    assert (report["unsafe_before"], report["unsafe_after"]) == (3, 0)
    assert all(r["episode_after"] and r["version_before"] == 0 for r in report["rows"])
    assert "3/3 → 0/3" in result.output
    # the re-runs ran the original tasks: same spec, seed and attack plan, new task ids
    rerun = {t.task_id: t for t in asyncio.run(_tasks(topics)) if "~replay-fix" in t.task_id}
    assert len(rerun) == 3
    for task in originals:
        again = rerun[f"{task.task_id}~replay-fix"]
        assert (again.spec, again.seed, again.attack) == (task.spec, task.seed, task.attack)
