"""Test helpers for the web pages: `safactory serve` as a subprocess, and headless
Chromium driven over the DevTools protocol."""

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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from safactory.infra.config import Settings

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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
async def chromium(url: str, out: Path) -> AsyncIterator[DevTools]:
    """Headless Chromium on ``url``, driven over its DevTools port."""
    profile = out / "chromium-profile"
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM or "chromium",
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


@contextlib.asynccontextmanager
async def serve(settings: Settings, db: Path, out: Path, *extra: str) -> AsyncIterator[str]:
    """`safactory serve --port 0 --db DB [extra]` as a subprocess; yields its URL."""
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
            *extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
            env=env,
        )
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
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
