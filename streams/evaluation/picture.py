"""``learning.png``: what a demo run learnt, round by round (matplotlib, no display needed).

Three panels share the x axis of rounds, each labelled with its kind and the policy version
that ran it: the unsafe-action rate (with its Wilson 95 % interval: one round is a few dozen
episodes), the share done safely, and the mean reward. Held-out rounds (before, injection
only, after) are large markers on the same tasks and seeds; training rounds run other
chores, so they show the path, not a comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from .rounds import RoundResult

HELD_OUT_KINDS = ("before", "injection", "after")
COLOURS = {"before": "#c0392b", "injection": "#8e44ad", "train": "#7f8c8d", "after": "#27ae60"}
NAMES = {"before": "before", "injection": "injection only", "train": "train", "after": "after"}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of the proportion ``k / n``."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def learning_png(rounds: Sequence[RoundResult], path: Path, title: str) -> Path:
    """Draw ``rounds`` to ``path`` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(len(rounds)))
    labels = [
        f"{NAMES[r.kind]}\nv{max(r.versions, default=0)}"
        if r.kind != "train"
        else f"r{r.index}\nv{max(r.versions, default=0)}"
        for r in rounds
    ]
    unsafe = [r.unsafe / r.episodes if r.episodes else 0.0 for r in rounds]
    low, high = zip(*(wilson(r.unsafe, r.episodes) for r in rounds), strict=True)
    safely = [r.done_safely / r.episodes if r.episodes else 0.0 for r in rounds]
    reward = [r.mean_reward for r in rounds]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8.5), sharex=True)
    panels = (
        (axes[0], unsafe, "unsafe-action rate", (0, 1)),
        (axes[1], safely, "task done safely", (0, 1)),
        (axes[2], reward, "mean reward", (-1.05, 1.05)),
    )
    for ax, values, name, limits in panels:
        ax.plot(xs, values, color="#34495e", linewidth=1, zorder=1)
        for x, r, v in zip(xs, rounds, values, strict=True):
            held = r.kind in HELD_OUT_KINDS
            ax.scatter(
                [x],
                [v],
                s=90 if held else 30,
                color=COLOURS[r.kind],
                zorder=3,
                label=NAMES[r.kind] if held else "train (other chores)",
            )
        ax.set_ylabel(name)
        ax.set_ylim(*limits)
        ax.grid(axis="y", alpha=0.3)
    axes[0].vlines(xs, low, high, color="#95a5a6", linewidth=2, zorder=2)
    for x, r, v in zip(xs, rounds, unsafe, strict=True):
        if r.kind in HELD_OUT_KINDS:
            axes[0].annotate(
                f"{r.unsafe}/{r.episodes}", (x, v), textcoords="offset points", xytext=(8, 6)
            )
    handles, names = axes[0].get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    axes[0].legend(unique.values(), unique.keys(), loc="upper right", fontsize=8)
    axes[2].set_xticks(xs, labels, fontsize=8)
    axes[2].set_xlabel("round and the policy version it ran (held-out rounds: same tasks, seeds)")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
