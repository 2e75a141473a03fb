"""Staleness, decided in one place (DESIGN.md, "Staleness").

Both questions are asked of one object: the simulation workers ask before starting an
episode (admission), the trainer asks before training on a trajectory (consumption).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Admission(StrEnum):
    """Answer to "may this worker start another episode now?"."""

    START = "start"
    RELOAD = "reload"
    """The worker's weights lag the latest announced version by more than max_staleness."""
    WAIT = "wait"
    """Too many episodes are in flight for the staleness bound to hold."""


@dataclass
class StalenessController:
    """Bounds how far behind the trainer's policy a trained-on action may be.

    ``max_staleness`` is in policy versions; ``max_in_flight`` bounds episodes running at
    once per worker, which together with admission caps staleness before compute is spent.
    """

    max_staleness: int = 2
    max_in_flight: int | None = None
    skipped: dict[int, int] = field(default_factory=dict)
    """Stale trajectories skipped by the trainer, counted by their lag in versions."""
    accepted: dict[int, int] = field(default_factory=dict)
    """Trajectories accepted, counted by their lag (the staleness histogram)."""

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0 (0 = strictly on-policy)")

    def admit_episode(self, worker_version: int, latest_version: int, in_flight: int) -> Admission:
        """Admission control for a simulation worker holding ``worker_version`` weights."""
        if latest_version - worker_version > self.max_staleness:
            return Admission.RELOAD
        if self.max_in_flight is not None and in_flight >= self.max_in_flight:
            return Admission.WAIT
        return Admission.START

    def is_fresh(self, trainer_version: int, trajectory_version: int) -> bool:
        """Pure rule: may the trainer at ``trainer_version`` use a trajectory whose oldest
        action came from ``trajectory_version``? (``v − m ≤ max_staleness``)."""
        return trainer_version - trajectory_version <= self.max_staleness

    def consume(self, trainer_version: int, trajectory_version: int) -> bool:
        """:meth:`is_fresh`, and count the outcome in :attr:`accepted` or :attr:`skipped`."""
        lag = trainer_version - trajectory_version
        bucket = (
            self.accepted if self.is_fresh(trainer_version, trajectory_version) else self.skipped
        )
        bucket[lag] = bucket.get(lag, 0) + 1
        return bucket is self.accepted

    @property
    def skipped_total(self) -> int:
        """All trajectories skipped as too stale."""
        return sum(self.skipped.values())
