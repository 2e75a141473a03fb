"""A person answers a paused episode from `safactory serve` (a real process on the real
broker): the pause on ``sf.control`` shows on the page's data, the answer posted behind the
token is published on ``sf.control`` for the runner, and the pause leaves the page."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest
from chromium import serve

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import Control, ControlCommand
from safactory.streams.monitor.view import LiveView

TOKEN = "k3y-for-the-control-test-0123"


async def _controls(settings: Settings, count: int) -> list[Control]:
    seen: list[Control] = []

    async def keep(d: Delivery) -> None:
        if isinstance(d.event, Control):
            seen.append(d.event)

    consumer = EventConsumer(
        ["control"], f"r-{uuid.uuid4().hex[:8]}", handler=keep, settings=settings
    )
    async with consumer:
        async with asyncio.timeout(60):
            while len(seen) < count:
                await consumer.poll_once(timeout_ms=300)
    return seen


def test_a_pause_is_listed_until_its_next_decision() -> None:
    view = LiveView(60, clock=lambda: 10.0)
    pause = Control(episode_id="a", command=ControlCommand.PAUSE, reason="high exfiltration")
    view.fold_control(pause, 5.0)
    view.fold_control(Control(episode_id="b", command=ControlCommand.PAUSE), 7.0)
    assert view.oldest_paused() == pause
    assert [p["episode_id"] for p in view.snapshot()["paused"]] == ["a", "b"]
    view.fold_control(Control(episode_id="a", command=ControlCommand.RESUME), 8.0)
    assert [p["episode_id"] for p in view.snapshot()["paused"]] == ["b"]


@pytest.mark.integration
async def test_a_paused_episode_is_answered_from_serve(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    async with serve(topics, tmp_path / "lancedb", tmp_path, "--token", TOKEN) as url:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=auth, timeout=10) as http:
            assert (
                await http.post("/api/control", json={"episode_id": "x", "approve": True})
            ).status_code == 404
            async with asyncio.timeout(60):  # the page follows the topics from here on
                while (await http.get("/api/view")).json()["status"] != "live":  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            pause = Control(
                episode_id="ep-wait",
                command=ControlCommand.PAUSE,
                reason="high data_exfiltration at step 2",
                verdict_ids=["v-9"],
            )
            await producer.publish(pause)
            async with asyncio.timeout(30):
                while not (await http.get("/api/view")).json()["paused"]:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
            listed = (await http.get("/api/view")).json()["paused"]
            assert [(p["episode_id"], p["control_id"]) for p in listed] == [
                ("ep-wait", pause.event_id)
            ]
            refused = await httpx.AsyncClient(base_url=url).post(
                "/api/control", json={"episode_id": "ep-wait", "approve": True}
            )
            assert refused.status_code == 401  # behind the token
            posted = await http.post(
                "/api/control", json={"episode_id": "ep-wait", "approve": False}
            )
            assert posted.status_code == 200
            async with asyncio.timeout(30):
                while (await http.get("/api/view")).json()["paused"]:  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
    first, answer = await _controls(topics, 2)
    assert first == pause
    assert answer.command is ControlCommand.HALT  # denied
    assert (answer.episode_id, answer.decided_by, answer.verdict_ids) == (
        "ep-wait",
        "person:serve",
        ["v-9"],
    )
