"""Resident memory of the chaos campaign's processes, sampled once a second from /proc.

Each worker runs in its own session (process group), so its memory is the sum of ``VmRSS``
over every process in that group: the worker and whatever it spawned. A killed and
restarted worker is a new *incarnation* with its own series; the summary reports each
incarnation's memory at start, after warm-up, at its end, its peak, and its slope after
warm-up (least squares, MB per minute), which is what "flat after warm-up" is judged by.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Incarnation:
    """One process group's life: (seconds since the campaign began, MB) samples."""

    pid: int
    started_s: float
    samples: list[tuple[float, float]] = field(default_factory=list)

    def summary(self, warmup_s: float) -> dict[str, float | int | None]:
        """Start, after warm-up, end, peak and post-warm-up slope of this incarnation."""
        if not self.samples:
            return {"pid": self.pid, "seconds": 0.0, "samples": 0}
        first_t = self.samples[0][0]
        warm = [(t, mb) for t, mb in self.samples if t - first_t >= warmup_s]
        return {
            "pid": self.pid,
            "seconds": round(self.samples[-1][0] - first_t, 1),
            "samples": len(self.samples),
            "start_mb": round(self.samples[0][1], 1),
            "warm_mb": round(warm[0][1], 1) if warm else None,
            "end_mb": round(self.samples[-1][1], 1),
            "peak_mb": round(max(mb for _, mb in self.samples), 1),
            "slope_mb_per_min": _slope_per_min(warm) if len(warm) >= 10 else None,
        }


def _slope_per_min(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    cov = sum((t - mean_t) * (y - mean_y) for t, y in points)
    return round(cov / var * 60.0, 2)


def group_rss_mb() -> dict[int, float]:
    """Process group id → summed VmRSS in MB, over every process this user can read."""
    totals: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                stat = fh.read()
            pgid = int(stat[stat.rindex(b")") + 2 :].split()[2])
            with open(f"/proc/{entry.name}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"VmRSS:"):
                        totals[pgid] = totals.get(pgid, 0.0) + int(line.split()[1]) / 1024
                        break
        except (OSError, ValueError, IndexError):
            continue  # the process ended while we read it
    return totals


class RssSampler:
    """Samples the process groups it was told about, every ``interval_s``, in a thread."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.started = time.monotonic()
        self.series: dict[str, list[Incarnation]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)

    def start(self) -> None:
        """Begin sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=10)

    def watch(self, name: str, pid: int) -> None:
        """From now on ``name`` is the process group led by ``pid`` (a new incarnation)."""
        with self._lock:
            self.series.setdefault(name, []).append(
                Incarnation(pid, round(time.monotonic() - self.started, 1))
            )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            totals = group_rss_mb()
            now = round(time.monotonic() - self.started, 1)
            with self._lock:
                for incarnations in self.series.values():
                    current = incarnations[-1]
                    if current.pid in totals:
                        current.samples.append((now, totals[current.pid]))

    def summary(self, warmup_s: float) -> dict[str, dict[str, object]]:
        """Per name: every incarnation's summary, and the longest-lived one's (the verdict)."""
        out: dict[str, dict[str, object]] = {}
        with self._lock:
            for name, incarnations in self.series.items():
                each = [i.summary(warmup_s) for i in incarnations]
                longest = max(each, key=lambda s: float(s.get("seconds") or 0.0))
                out[name] = {"incarnations": each, "longest": longest}
        return out

    def raw(self) -> dict[str, list[dict[str, object]]]:
        """Every sample, per name and incarnation (for plots)."""
        with self._lock:
            return {
                name: [
                    {"pid": i.pid, "started_s": i.started_s, "samples": list(i.samples)}
                    for i in incarnations
                ]
                for name, incarnations in self.series.items()
            }
