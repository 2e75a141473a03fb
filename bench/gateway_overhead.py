"""What the gateway adds to a chat completion, measured side by side in one run.

    python bench/gateway_overhead.py [--conversations 150]

An upstream that answers at once (a scripted OpenAI-compatible server in its own process:
the model's own time is zero) is called directly and through ``safactory gateway`` (its own
process, on the broker at ``SF_KAFKA_BOOTSTRAP``, one started under ``SF_HOME`` if none
answers), alternately, with the same two-call conversations an agent loop makes: a request
answered by a tool call (the gateway audits it), then the tool's result answered in text.
Each loop is made on every API the gateway speaks (chat completions, the Responses API
chained by ``previous_response_id``, Anthropic Messages), against the same direct chat calls.
Printed: client-observed latency p50/p99 direct and through the gateway per API, their
difference, and the gateway's own time per call from its ``x-sf-gateway-ms`` header (finding the
episode, the fast audit tier, publishing the steps and waiting for the broker's ack).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI, Request

from safactory.agents.gateway.app import OVERHEAD_HEADER
from safactory.infra.config import Settings

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file of the workspace",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": "README.md"})},
        }
    ],
}
TEXT = {"role": "assistant", "content": "The README describes the shop's stock tools."}


def serve_upstream(port_file: Path) -> None:
    """The scripted upstream: a tool call first, text once a tool result came back."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def _chat(request: Request) -> dict:
        body = await request.json()
        answered = any(m.get("role") == "tool" for m in body["messages"])
        message = TEXT if answered else CALL
        return {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "m"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "stop" if answered else "tool_calls",
                }
            ],
        }

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_file.write_text(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False)).run(sockets=[sock])


def _wait_for(path: Path, pattern: str, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{process.args} exited: {path.read_text()}")
        text = path.read_text() if path.exists() else ""
        if text and pattern in text:
            return text
        time.sleep(0.1)
    raise SystemExit(f"{process.args} did not start: {path.read_text()}")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def conversation(http: httpx.AsyncClient, base: str, n: int) -> tuple[list[float], list[str]]:
    """One agent loop of two calls; the client-observed ms of each, and the gateway's
    header values (empty direct)."""
    messages = [
        {"role": "system", "content": "You are a coding assistant with tools."},
        {"role": "user", "content": f"Summarise README.md for ticket {n}."},
    ]
    times, own = [], []
    for _ in range(2):
        started = time.perf_counter()
        response = await http.post(
            f"{base}/chat/completions", json={"model": "m", "messages": messages, "tools": TOOLS}
        )
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        own.append(response.headers.get(OVERHEAD_HEADER, ""))
        reply = response.json()["choices"][0]["message"]
        messages.append(reply)
        messages.append({"role": "tool", "tool_call_id": "c1", "content": "# Shop tools\n..."})
    return times, own


async def responses_conversation(
    http: httpx.AsyncClient, base: str, n: int
) -> tuple[list[float], list[str]]:
    """The same loop on the Responses API: the tool's output chained to the first reply by
    ``previous_response_id``."""
    tools = [{"type": "function", **t["function"]} for t in TOOLS]
    body: dict = {
        "model": "m",
        "instructions": "You are a coding assistant with tools.",
        "input": f"Summarise README.md for ticket {n}.",
        "tools": tools,
    }
    times, own = [], []
    for _ in range(2):
        started = time.perf_counter()
        response = await http.post(f"{base}/responses", json=body)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        own.append(response.headers.get(OVERHEAD_HEADER, ""))
        output = {"type": "function_call_output", "call_id": "c1", "output": "# Shop tools\n..."}
        body = {"model": "m", "previous_response_id": response.json()["id"], "input": [output]}
        body["tools"] = tools
    return times, own


async def messages_conversation(
    http: httpx.AsyncClient, base: str, n: int
) -> tuple[list[float], list[str]]:
    """The same loop on Anthropic's Messages API (the whole history sent each time)."""
    function = TOOLS[0]["function"]
    tools = [{"name": function["name"], "input_schema": function["parameters"]}]
    messages: list[dict] = [{"role": "user", "content": f"Summarise README.md for ticket {n}."}]
    times, own = [], []
    for _ in range(2):
        body = {"model": "m", "max_tokens": 256, "messages": messages, "tools": tools}
        body["system"] = "You are a coding assistant with tools."
        started = time.perf_counter()
        response = await http.post(f"{base}/messages", json=body)
        times.append((time.perf_counter() - started) * 1000)
        response.raise_for_status()
        own.append(response.headers.get(OVERHEAD_HEADER, ""))
        messages.append({"role": "assistant", "content": response.json()["content"]})
        result = {"type": "tool_result", "tool_use_id": "c1", "content": "# Shop tools\n..."}
        messages.append({"role": "user", "content": [result]})
    return times, own


APIS = {
    "chat": conversation,
    "responses": responses_conversation,
    "messages": messages_conversation,
}
"""The gateway's APIs, each measured against the same direct chat calls."""


async def measure(direct: str, gateway: str, conversations: int) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=30) as http:
        for i in range(10):  # warm every path (connections, the auditor's caches)
            await conversation(http, direct, -i)
            for loop in APIS.values():
                await loop(http, gateway, -i)
        plain: list[float] = []
        through: dict[str, list[float]] = {api: [] for api in APIS}
        own: dict[str, list[float]] = {api: [] for api in APIS}
        for i in range(conversations):
            plain += (await conversation(http, direct, i))[0]
            for api, loop in APIS.items():
                times, header = await loop(http, gateway, i)
                through[api] += times
                own[api] += [float(h) for h in header]
    out = {"direct_p50_ms": pct(plain, 0.5), "direct_p99_ms": pct(plain, 0.99)}
    for api in APIS:
        prefix = "" if api == "chat" else f"{api}_"
        out |= _through(prefix, plain, through[api], own[api])
    return out


def _through(
    prefix: str, plain: list[float], through: list[float], own: list[float]
) -> dict[str, float]:
    return {
        "direct_p50_ms": pct(plain, 0.5),
        "direct_p99_ms": pct(plain, 0.99),
        f"{prefix}gateway_p50_ms": pct(through, 0.5),
        f"{prefix}gateway_p99_ms": pct(through, 0.99),
        f"{prefix}added_p50_ms": pct(through, 0.5) - pct(plain, 0.5),
        f"{prefix}added_p99_ms": pct(through, 0.99) - pct(plain, 0.99),
        f"{prefix}own_p50_ms": pct(own, 0.5),
        f"{prefix}own_p99_ms": pct(own, 0.99),
        f"{prefix}own_mean_ms": statistics.fmean(own),
        f"{prefix}calls": len(through),
    }


@contextlib.contextmanager
def gateway_on_upstream(settings: Settings) -> Iterator[tuple[str, str, subprocess.Popen]]:
    """The scripted upstream and ``safactory gateway`` on it, each its own process, on
    topics of their own: yields the upstream's ``/v1`` URL, the gateway's and its process."""
    import os
    import uuid

    work = Path(tempfile.mkdtemp(prefix="sf-gw-bench-"))
    port_file = work / "upstream.port"
    upstream = subprocess.Popen(
        [sys.executable, "-m", "safactory.bench.gateway_overhead", "--serve-upstream", port_file]
    )
    log = work / "gateway.log"
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "SF_TOPIC_PREFIX": f"bench{uuid.uuid4().hex[:8]}.",
    }
    gateway = None
    try:
        port = _wait_for(port_file, "", upstream).strip()
        direct = f"http://127.0.0.1:{port}/v1"
        command = [sys.executable, "-m", "safactory.cli.main", "gateway", "--upstream", direct]
        with log.open("w") as out:
            gateway = subprocess.Popen(
                [*command, "--port", "0"], stdout=out, stderr=subprocess.STDOUT, env=env
            )
        text = _wait_for(log, "gateway on http://", gateway)
        base = text.split("gateway on ", 1)[1].split()[0]
        time.sleep(1.0)  # the lifespan connects to the broker after the socket listens
        yield direct, base, gateway
    finally:
        for process in (gateway, upstream):
            if process is not None:
                process.terminate()
                process.wait(timeout=20)


def run(settings: Settings, conversations: int) -> dict[str, float]:
    """Start the upstream and the gateway, measure, stop them."""
    with gateway_on_upstream(settings) as (direct, base, _):
        return asyncio.run(measure(direct, base, conversations))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=150, help="agent loops per path")
    parser.add_argument("--serve-upstream", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    from safactory.bench.quick import a_broker

    settings = Settings()
    with a_broker(settings):
        result = run(settings, args.conversations)
    print(
        f"{result['calls']} calls per API through the gateway, as many direct "
        "(upstream answers at once)"
    )
    print(
        f"  direct chat        p50 {result['direct_p50_ms']:.1f} ms  "
        f"p99 {result['direct_p99_ms']:.1f} ms"
    )
    for api in APIS:
        prefix = "" if api == "chat" else f"{api}_"
        r = {k.removeprefix(prefix): v for k, v in result.items() if k.startswith(prefix)}
        print(
            f"  {api:<9} gateway  p50 {r['gateway_p50_ms']:.1f} ms  "
            f"p99 {r['gateway_p99_ms']:.1f} ms"
            f"  added p50 {r['added_p50_ms']:.1f} ms  p99 {r['added_p99_ms']:.1f} ms"
            f"  own (header) p50 {r['own_p50_ms']:.1f} ms  p99 {r['own_p99_ms']:.1f} ms"
        )


if __name__ == "__main__":
    main()
