"""When an episode is complete: the one definition for every reader of its events.

An episode is complete once its ``EpisodeEnded`` arrived and as many of its steps as the end
counts (``num_steps``: the steps the episode published). Steps are counted, not looked up
by the index ``num_steps - 1``: a branch episode numbers its steps from its branch step on,
so its last index is not its count. The live auditor (the deep tier, then forgetting the
context) and the assembler (a trajectory's steps all in) both ask :func:`episode_complete`.
"""

from __future__ import annotations


def episode_complete(num_steps: int | None, steps_seen: int) -> bool:
    """Whether an episode whose end declared ``num_steps`` (None: no end read yet) is
    complete with ``steps_seen`` distinct steps of it read."""
    return num_steps is not None and steps_seen >= num_steps
