"""`safactory serve` end to end in headless Chromium: an unsafe step is produced, the live
auditor raises the alert, and the page (driven over the DevTools protocol) shows it; then the
episode view renders the step with its verdicts from LanceDB. Screenshots of both go to the
test's output folder."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from chromium import CHROMIUM, chromium, serve
from topic_records import collect

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, FunctionCall, Step, ToolCall, Verdict, codec

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
SHOW_WITHIN_S = 2.0


async def _audit_worker(settings: Settings) -> tuple[Any, asyncio.Task[None]]:
    """The live auditor (the beyond-scope principle only), joined to its group."""
    from safactory.streams.audit import registry
    from safactory.streams.audit.engine import AuditEngine
    from safactory.streams.audit.worker import AuditWorker

    worker = AuditWorker(AuditEngine(registry.create(["harm.beyond_scope"])), settings)
    serving = asyncio.create_task(worker.serve())
    async with asyncio.timeout(30):
        while not worker.runtime.assigned:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    return worker, serving


async def test_planted_unsafe_step_shows_as_an_alert_in_chromium(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    from safactory.sinks.lance import LanceSink

    marker = uuid.uuid4().hex[:10]
    episode = f"ep-{marker}"
    db = tmp_path / "lancedb"
    worker, serving = await _audit_worker(topics)
    try:
        async with serve(topics, db, tmp_path) as url, chromium(url, tmp_path) as page:
            await page.until("document.getElementById('status').textContent === 'live'", 30)
            step = Step(
                episode_id=episode,
                step_index=0,
                env="os",
                task_id="t",
                policy_version=1,
                action=Action(
                    tool_call=ToolCall(
                        id="c0",
                        function=FunctionCall(
                            name="shell", arguments=json.dumps({"command": f"rm -rf /srv/{marker}"})
                        ),
                    )
                ),
            )
            await producer.publish(step)
            shown = await page.until(
                "[...document.querySelectorAll('#alerts tbody tr')].some(r => "
                f"r.textContent.includes('{marker}') && r.textContent.includes('high'))",
                15,
            )
            live_png = await page.screenshot(tmp_path / "serve-live.png")
            row = await page.js(
                "[...document.querySelectorAll('#alerts tbody tr')].map(r => r.innerText)"
                f".find(t => t.includes('{marker}'))"
            )
            print(
                f"\nalert in Chromium's DOM {shown * 1000:.0f} ms after the unsafe step's "
                f"publish was acked; screenshot {live_png}"
            )
            assert shown <= SHOW_WITHIN_S, f"alert took {shown:.2f}s to appear"
            assert "destructive_operation" in row and f"rm -rf /srv/{marker}" in row

            # the episode view: what the sink would have stored (the step and its verdicts)
            verdicts = await _verdicts_of(topics, episode)
            deliveries = [
                Delivery(e, topics.topic(e.TOPIC), 0, n, None, [])
                for n, e in enumerate([step, *verdicts])
            ]
            LanceSink(db).write_batch(deliveries)
            await page.call("Page.navigate", url=f"{url}episodes/{episode}")
            await page.until(
                "document.querySelector('#episode-steps li[data-step=\"0\"]')?.textContent"
                ".includes('high')",
                15,
            )
            episode_png = await page.screenshot(tmp_path / "serve-episode.png")
            text = await page.js("document.getElementById('episode-steps').innerText")
            print(f"episode view screenshot {episode_png}")
            assert f"rm -rf /srv/{marker}" in text and "destructive_operation" in text
    finally:
        worker.runtime.request_stop()
        await asyncio.wait_for(serving, 30)


async def _verdicts_of(settings: Settings, episode: str) -> list[Verdict]:
    """The verdicts on ``sf.verdicts`` for ``episode`` (one partition: keyed by episode)."""

    def ours(records: list) -> list[Verdict]:
        events = [codec.decode(r.value, r.headers) for r in records]
        return [e for e in events if isinstance(e, Verdict) and e.episode_id == episode]

    found = ours(await collect(settings, settings.topic("verdicts"), lambda rs: bool(ours(rs)), 15))
    return found
