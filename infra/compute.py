"""Compute paths chosen by measurement on the CPU at hand.

An embedded model can be computed several ways (torch's int8 ``_int_mm``, float32 in
onnxruntime, bfloat16 autocast) and which is fastest depends on the CPU: int8 is twice
float32's speed where AMX or VNNI does it and nineteen times slower where neither does.
So no path is assumed: each candidate is timed briefly on the first load, the fastest is
kept, and the choice is cached per machine (CPU model, its flags and any ISA cap in the
environment) and per model, in ``$SF_HOME/compute/``. ``safactory doctor`` prints the CPU
class and every choice; benchmarks print the same.

The environment caps of the math libraries (:data:`CAPS`) are part of the machine's identity
here, so a run limited to AVX2 measures and caches its own choices. ``ATEN_CPU_CAPABILITY``
and ``ONEDNN_MAX_CPU_ISA`` alone leave torch's float32 products on MKL's AVX-512 kernels
(measured: a 512x384 by 384x1536 product 4.1 ms either way, 6.2 ms with
``MKL_ENABLE_INSTRUCTIONS=AVX2`` too).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

CAPS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "OPENBLAS_CORETYPE")
"""Environment variables that limit the instruction sets the math libraries use (torch's
own kernels, oneDNN, MKL's float32 products, numpy's OpenBLAS). onnxruntime has none: it
picks its kernels from the CPU's flags alone."""

FLAGS = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)
"""The CPU flags that decide which kernels are fast (reported and part of the identity)."""

BUSY = 0.25
"""The share of the cores other processes may keep busy while candidates are timed: a
timing under more load is not kept for good (a worker started beside a load test once
cached a path 9x off its idle speed)."""
T = TypeVar("T")


def _cpuinfo() -> tuple[str, set[str]]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine(), set()
    model, flags = platform.machine(), set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model == platform.machine():
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    return model, flags


def _capped(flags: set[str]) -> set[str]:
    """The flags left usable under the environment's ISA caps (an AVX2 cap drops AVX-512,
    VNNI and AMX, as the libraries do)."""
    caps = " ".join(os.environ.get(name, "") for name in CAPS).lower()
    if "avx2" in caps or "haswell" in caps:
        return {f for f in flags if not f.startswith(("avx512", "amx", "avx_vnni"))}
    return flags


def cpu_class() -> dict[str, object]:
    """The CPU model, the flags that matter, any cap, and a class name figures are kept by."""
    model, flags = _cpuinfo()
    usable = _capped(flags)
    if {"amx_bf16", "amx_int8"} <= usable:
        name = "avx512-amx"
    elif "avx512_bf16" in usable or "avx512_vnni" in usable:
        name = "avx512-vnni"
    elif "avx512f" in usable:
        name = "avx512"
    elif "avx2" in usable:
        name = "avx2"
    else:
        name = platform.machine()
    caps = {k: os.environ[k] for k in CAPS if os.environ.get(k)}
    return {
        "class": name,
        "model": model,
        "flags": sorted(f for f in FLAGS if f in usable),
        "caps": caps,
        "cores": os.cpu_count() or 1,
    }


def native_bf16() -> bool:
    """Whether the CPU computes bfloat16 natively (AVX512_BF16 or AMX): elsewhere bfloat16
    autocast emulates it and runs several times slower than float32."""
    flags = set(cpu_class()["flags"])  # type: ignore[arg-type]
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def _identity() -> str:
    info = cpu_class()
    text = json.dumps([info["model"], info["flags"], info["caps"]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cache_file() -> Path:
    from .config import get_settings

    return Path(get_settings().home) / "compute" / f"{_identity()}.json"


def _read() -> dict[str, dict[str, object]]:
    try:
        return json.loads(_cache_file().read_text())
    except (OSError, ValueError):
        return {}


def choices() -> dict[str, dict[str, object]]:
    """Every choice cached for this machine: model key → chosen path and its timings."""
    return _read()


def interleaved(runs: dict[str, Callable[[], object]], rounds: int = 7) -> dict[str, float]:
    """The median seconds of each run, timed in alternation after one warm-up call each,
    so load from elsewhere on the machine falls on every candidate alike."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def _machine_seconds() -> float:
    """CPU seconds every process on the machine has spent since boot (``/proc/stat``; 0
    where there is none)."""
    try:
        ticks = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait


def others_busy(run: Callable[[], T]) -> tuple[T, float]:
    """``run()``'s result and the share of the machine's cores that other processes kept
    busy meanwhile (0: they left it alone; 1: every core was theirs)."""
    mine, machine, start = os.times(), _machine_seconds(), time.perf_counter()
    result = run()
    wall = time.perf_counter() - start
    after = os.times()
    own = after.user + after.system - mine.user - mine.system
    others = _machine_seconds() - machine - own
    return result, max(0.0, others) / (wall * (os.cpu_count() or 1))


def choose(key: str, candidates: dict[str, Callable[[], Callable[[], object]]]) -> str:
    """The fastest of ``candidates`` (name → a loader returning one timed run) for model
    ``key``, measured once per machine and cached; a single candidate is taken as is. A
    choice timed while other processes kept more than :data:`BUSY` of the cores busy is
    provisional: taken, and timed again at the next load until the machine is quiet."""
    cached = _read().get(key) or {}
    quiet = "others_busy" in cached and not cached.get("provisional")  # older: timed again
    if quiet and cached.get("chosen") in candidates:
        return str(cached["chosen"])
    if len(candidates) == 1:
        return next(iter(candidates))
    runs = {name: load() for name, load in candidates.items()}
    timings, others = others_busy(lambda: interleaved(runs))
    chosen = min(timings, key=timings.__getitem__)
    record = _read()
    record[key] = {
        "chosen": chosen,
        "ms": {name: round(s * 1000, 2) for name, s in timings.items()},
        "measured": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "others_busy": round(others, 2),
    } | ({"provisional": True} if others > BUSY else {})
    path = _cache_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.replace(path)
    return chosen
