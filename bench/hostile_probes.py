"""Issue #44's probes against the real servers, each timed (docs/RELIABILITY.md lists them).

    python bench/hostile_probes.py

Starts a scripted upstream (``bench/gateway_overhead.py``'s) and ``safactory gateway`` on
the broker at ``SF_KAFKA_BOOTSTRAP`` (one started under ``SF_HOME`` if none answers), then:

* bodies of 1 MB in hostile shapes (escaped quotes, deep nesting, many keys, one long
  string) and the 128 KB escaped-quote body that once took 117 s of CPU: the time to each
  answer, and the gateway's ``/health`` latency while one, then eight, are in flight;
* 40 chat calls of 30,000 empty messages each (1 MB of JSON apiece): the gateway's RSS
  before, after ten and after forty;
* a request head trickled a byte at a time: the seconds until the gateway closes it;
* ``safactory audit /dev/zero``: its time, what it printed and its peak RSS.
"""

from __future__ import annotations

import asyncio
import resource
import socket
import statistics
import subprocess
import sys
import time

import httpx
import psutil

from safactory.bench.gateway_overhead import gateway_on_upstream
from safactory.infra.config import Settings

SHAPES = {
    "escaped quotes": lambda n: '{"messages": "' + '\\"' * (n // 2) + '"}',
    "deep nesting": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "many keys": lambda n: "{" + ",".join(f'"k{i}": 0' for i in range(n // 12)) + "}",
    "one long string": lambda n: (
        '{"model": "m", "messages": [{"role": "user", "content": "' + "x" * n + '"}]}'
    ),
}


async def bodies(base: str) -> dict[str, float]:
    """Milliseconds to each hostile body's answer, and /health's p99 while they run."""
    out: dict[str, float] = {}
    async with httpx.AsyncClient(timeout=120) as http:
        headers = {"Content-Type": "application/json"}
        for name, make in [*SHAPES.items(), ("128 KB escaped quotes", None)]:
            body = SHAPES["escaped quotes"](128_000) if make is None else make(1_000_000)
            began = time.perf_counter()
            answer = await http.post(f"{base}/v1/chat/completions", content=body, headers=headers)
            out[f"{name}: {answer.status_code}, ms"] = (time.perf_counter() - began) * 1000
        hostile = SHAPES["escaped quotes"](128_000)
        for at_once in (1, 8):
            health = []
            for _ in range(40 // at_once):
                flood = [
                    asyncio.create_task(
                        http.post(f"{base}/v1/chat/completions", content=hostile, headers=headers)
                    )
                    for _ in range(at_once)
                ]
                while not all(task.done() for task in flood):
                    began = time.perf_counter()
                    await http.get(f"{base}/health")
                    health.append((time.perf_counter() - began) * 1000)
                await asyncio.gather(*flood)
            p99 = statistics.quantiles(health, n=100)[98] if len(health) > 1 else max(health)
            out[f"/health, {at_once} hostile bodies in flight: p99 ms"] = p99
    return out


def empty_messages(base: str, gateway: psutil.Process) -> dict[str, float]:
    """The gateway's RSS (MiB) as 40 calls of 30,000 empty messages go through."""
    empty = [{"role": "user", "content": ""}] * 30_000
    out = {"RSS before, MiB": gateway.memory_info().rss / 2**20}
    for n in range(40):
        chat = {"model": "m", "messages": [{"role": "user", "content": f"{n}"}, *empty]}
        httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=120).raise_for_status()
        if n + 1 in (10, 40):
            out[f"RSS after {n + 1} calls, MiB"] = gateway.memory_info().rss / 2**20
    return out


def trickle(base: str) -> float:
    """Seconds until a connection sending its head a byte every 0.5 s is closed."""
    host, port = base.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=60)
    began = time.monotonic()
    conn.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    try:
        while time.monotonic() - began < 60:
            conn.sendall(b"X")
            time.sleep(0.5)
    except OSError:
        pass
    return time.monotonic() - began


def audit_dev_zero() -> dict[str, float | str]:
    """``safactory audit /dev/zero``: seconds, what it said, peak RSS (a fresh parent)."""
    measured = (
        "import resource, subprocess, sys, time; t = time.perf_counter(); "
        "d = subprocess.run([sys.executable, '-m', 'safactory.cli.main', 'audit', "
        "'/dev/zero'], capture_output=True, text=True); "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
        "print((d.stdout + d.stderr).strip())"
    )
    out = subprocess.run([sys.executable, "-c", measured], capture_output=True, text=True).stdout
    first, said = out.split("\n", 1)
    seconds, peak = first.split()
    return {"seconds": float(seconds), "peak MiB": int(peak) / 1024, "said": said.strip()}


def run(settings: Settings) -> None:
    with gateway_on_upstream(settings) as (_, v1, gateway):
        base = v1.removesuffix("/v1")
        for name, value in asyncio.run(bodies(base)).items():
            print(f"{name:45s} {value:10.1f}")
        for name, value in empty_messages(base, psutil.Process(gateway.pid)).items():
            print(f"40 x 30,000 empty messages: {name:22s} {value:8.0f}")
        print(f"{'a head trickled a byte every 0.5 s: closed after, s':45s} {trickle(base):10.1f}")
    zero = audit_dev_zero()
    print(f"safactory audit /dev/zero: {zero['seconds']:.2f} s, peak {zero['peak MiB']:.0f} MiB")
    print(f"  said: {zero['said']}")


def main() -> None:
    from safactory.bench.quick import a_broker

    settings = Settings()
    with a_broker(settings):
        run(settings)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    print(f"this process's peak RSS: {peak} MiB")


if __name__ == "__main__":
    main()
