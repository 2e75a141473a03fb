"""`safactory serve` end to end in headless Chromium: an unsafe step is produced, the live
auditor raises the alert, and the page (driven over the DevTools protocol) shows it; then the
episode view renders the step with its verdicts from LanceDB. Screenshots of both go to the
test's output folder."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from topic_records import collect

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, FunctionCall, Step, ToolCall, Verdict, codec

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
SHOW_WITHIN_S = 2.0


class DevTools:
    """A minimal DevTools-protocol client for one page."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = json.loads((await self.ws.receive(timeout=15)).data)
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    async def js(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def until(self, expression: str, timeout_s: float, interval_s: float = 0.02) -> float:
        """Seconds until ``expression`` is truthy on the page."""
        start = time.monotonic()
        async with asyncio.timeout(timeout_s):
            while not await self.js(expression):  # noqa: ASYNC110 (polling the page)
                await asyncio.sleep(interval_s)
        return time.monotonic() - start

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png")
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
        return path


@contextlib.asynccontextmanager
async def _serve(settings: Settings, db: Path, out: Path) -> AsyncIterator[str]:
    """`safactory serve --port 0` as a subprocess; yields its URL."""
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": settings.topic_prefix,
    }
    with (out / "serve.stderr").open("wb") as errors:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "safactory.cli.main",
            "serve",
            "--port",
            "0",
            "--db",
            str(db),
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            env=env,
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert line.startswith("serving http://"), (line, (out / "serve.stderr").read_text())
            yield line.split()[1]
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    assert "Traceback" not in (out / "serve.stderr").read_text()


@contextlib.asynccontextmanager
async def _chromium(url: str, out: Path) -> AsyncIterator[DevTools]:
    """Headless Chromium on ``url``, driven over its DevTools port."""
    profile = out / "chromium-profile"
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--no-default-browser-check",
        "--hide-scrollbars",
        "--window-size=1400,900",
        "--remote-debugging-port=0",
        f"--user-data-dir={profile}",
        url,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        async with asyncio.timeout(30):
            while not port_file.exists() or not port_file.read_text().strip():  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as http:
            async with asyncio.timeout(15):
                while True:
                    async with http.get(f"http://127.0.0.1:{port}/json/list") as answer:
                        pages = [p for p in await answer.json() if p["url"].startswith(url)]
                    if pages:
                        break
                    await asyncio.sleep(0.1)
            async with http.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                yield DevTools(ws)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        await proc.wait()


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
        async with _serve(topics, db, tmp_path) as url, _chromium(url, tmp_path) as page:
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
