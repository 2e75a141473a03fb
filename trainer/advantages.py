"""Group-relative advantages (GRPO): each trajectory's reward against its group's."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence


def group_relative_advantages(
    group_ids: Sequence[str],
    rewards: Sequence[float],
    *,
    normalize: bool = True,
    eps: float = 1e-6,
) -> list[float]:
    """``(r − mean_group) / (std_group + eps)`` per trajectory (no division if not ``normalize``).

    A group with one member, or whose rewards are all equal, gives advantage 0: there is
    nothing to compare against.
    """
    if len(group_ids) != len(rewards):
        raise ValueError("one group id per reward is needed")
    members: dict[str, list[int]] = defaultdict(list)
    for i, group in enumerate(group_ids):
        members[group].append(i)
    out = [0.0] * len(rewards)
    for indices in members.values():
        values = [float(rewards[i]) for i in indices]
        mean = statistics.fmean(values)
        std = statistics.pstdev(values) if len(values) > 1 else 0.0
        for i, value in zip(indices, values, strict=True):
            centred = value - mean
            out[i] = centred / (std + eps) if normalize else centred
    return out
