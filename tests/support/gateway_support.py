"""Real servers for gateway tests: ``safactory gateway`` as a process, and a scripted
OpenAI-compatible upstream (a real HTTP server in a thread) whose replies are fixed."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request

from safactory.infra.config import Settings


@contextlib.contextmanager
def scripted_upstream(
    replies: list[dict[str, Any]] | Callable[[dict[str, Any]], dict[str, Any]],
    fingerprint: str | None = None,
    seen: list[dict[str, Any]] | None = None,
) -> Iterator[str]:
    """An upstream answering a chat with ``replies[n]``, n = the tool results in it so far
    (so each turn of an agent loop gets its own reply), or with ``replies(body)``; yields
    its ``/v1`` base URL. The request bodies are appended to ``seen`` when given."""
    app = FastAPI()
    seen = [] if seen is None else seen

    @app.post("/v1/chat/completions")
    async def _chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        seen.append(body)
        if callable(replies):
            message = replies(body)
        else:
            turn = sum(1 for m in body["messages"] if m.get("role") == "tool")
            message = replies[min(turn, len(replies) - 1)]
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        reply = {
            "id": f"chatcmpl-{len(seen)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        if fingerprint:
            reply["system_fingerprint"] = fingerprint
        return reply

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def gateway_process(upstream: str, settings: Settings, log: Path, *extra: str) -> Iterator[str]:
    """``safactory gateway`` on a free port against ``upstream`` on the test's topics;
    yields its ``/v1`` base URL once it answers."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": settings.topic_prefix,
    }
    command = [sys.executable, "-m", "safactory.cli.main", "gateway", "--upstream", upstream]
    with log.open("w") as out:
        process = subprocess.Popen(
            [*command, "--port", "0", *extra], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        deadline = time.monotonic() + 60
        base = None
        while time.monotonic() < deadline:
            assert process.poll() is None, f"gateway exited: {log.read_text()}"
            found = re.search(r"gateway on (http://[\d.]+:\d+/v1)", log.read_text())
            if found:
                with contextlib.suppress(httpx.HTTPError):
                    health = httpx.get(found[1][: -len("/v1")] + "/health", timeout=2)
                    if health.status_code in (200, 401):  # 401: it answers, with --token
                        base = found[1]
                        break
            time.sleep(0.1)
        assert base is not None, f"gateway did not start: {log.read_text()}"
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
