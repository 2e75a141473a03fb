"""What ``scan`` costs an agent that guards itself in-process: latency per call, warm.

    python bench/scan_latency.py [--data ../shared/data/audit] [--records 40]

Real chats (AgentDojo runs, OpenAI message lists): every prefix that ends with an assistant
turn is scanned, as an agent would before running that turn's tool call, once with the
default checkers (those the live audit worker runs) and once with the fast tier (rules and
heuristics), alternately, after one warm-up pass (the checkers load on the first call and
model checkers fill their per-text caches). Printed: p50 / p99 / max per scan and the
decisions, for each checker set, on this CPU (its class first). No broker is used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from safactory.infra.compute import cpu_class
from safactory.streams.audit import registry
from safactory.tools.scan import scan

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/audit"
FAST = ",".join(
    n for n, f in registry.available().items() if getattr(f, "kind", "") in ("rule", "heuristic")
)


def prefixes(data: Path, records: int) -> list[list[dict]]:
    """Each chat up to each of its assistant turns, from the first ``records`` runs."""
    out: list[list[dict]] = []
    for file in sorted((data / "trajectories/agentdojo").glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            raw = json.loads(line)
            messages = raw.get("messages")
            if not messages:
                continue
            out += [messages[: i + 1] for i, m in enumerate(messages) if m["role"] == "assistant"]
            records -= 1
            if records == 0:
                return out
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--records", type=int, default=40)
    args = parser.parse_args()
    chats = prefixes(args.data, args.records)
    info = cpu_class()
    print(f"cpu: {info['class']} ({info['model']}), {info['cores']} cores; {len(chats)} scans")
    sets = {"default checkers": None, "fast tier": FAST}
    started = time.perf_counter()
    for checkers in sets.values():
        scan(chats[0], checkers=checkers)
    print(f"first call (checkers loaded): {time.perf_counter() - started:.1f} s")
    for chat in chats:  # warm-up pass: the model checkers' caches as a long-lived agent has
        scan(chat)
    times: dict[str, list[float]] = {k: [] for k in sets}
    decisions: dict[str, dict[str, int]] = {k: {} for k in sets}
    for chat in chats:
        for label, checkers in sets.items():
            t0 = time.perf_counter()
            decision = scan(chat, checkers=checkers).decision.value
            times[label].append((time.perf_counter() - t0) * 1000)
            decisions[label][decision] = decisions[label].get(decision, 0) + 1
    for label, values in times.items():
        print(
            f"{label:<17} p50 {pct(values, 0.5):6.2f}  p99 {pct(values, 0.99):6.2f}  max "
            f"{max(values):6.2f}  mean {statistics.fmean(values):6.2f} ms;  {decisions[label]}"
        )


if __name__ == "__main__":
    main()
