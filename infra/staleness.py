"""Staleness, decided in one place (DESIGN.md, "Staleness").

Both questions are asked of one object: the simulation workers ask before starting an
episode (admission), the trainer asks before training on a trajectory (consumption).

Admission: the version rule and, given the trainer's ``batch_size``, the capacity rule.

- Version rule: a worker whose weights lag the latest announced version by more than
  ``max_staleness`` reloads first.
- Capacity rule (AReaL's ``get_capacity``, from counts a worker has without talking to the
  others). The trainer announces with every version ``consumed``: the trajectories it has
  finished with (trained on or skipped as stale); every update takes at least
  ``batch_size``. An episode on weights ``w`` while the trainer is at ``v`` is fresh if it
  is taken within the next ``k = max_staleness + 1 − (v − w)`` updates, which consume at
  least ``k × batch_size``. So while ``started < consumed + k × batch_size`` the episodes
  already started cannot, by themselves, fund the update that would leave it stale:
  capacity is that difference, in AReaL's form
  ``(max_staleness + v + 1) × batch_size − (accepted + running)`` when every update takes
  exactly one batch. The bound is taken for the new episode and for the oldest episode
  this controller has in flight (new starts must not fund the update that makes *it*
  stale), and a worker with capacity left only on newer weights reloads first (so episodes
  start on the latest weights: ``k`` is largest).
- Stragglers. Environment latency is long-tailed: protecting every running episode holds
  the whole fleet back for the slowest one (sync training's problem). An episode still
  running after :attr:`protect_quantile` of the durations this controller has seen end is
  no longer protected: it will likely arrive stale, and the trainer's header check
  (:meth:`is_fresh`, the guarantee) skips it.
- Several workers: ``workers`` controllers (one per worker process) each admit against
  ``1/workers`` of the budget with their own count of episodes started, so the fleet's
  total stays within it and no worker needs another's counts (a straggler is protected
  from its own worker's starts only). Counting starts at the first announcement a
  controller sees (a worker joining late inherits no budget for episodes it never ran); a
  trainer whose count goes back (a fresh checkpoint) restarts it at the episodes in flight.
- Liveness: a controller with nothing in flight may always start one episode (within the
  version rule), so the capacity rule can slow the fleet, never stop it, even when a
  trajectory never reaches the trainer (a dead letter) or a skip is not announced yet.

Measured in docs/DECISIONS.md ("Admission: a capacity rule so async rollouts are not
wasted").
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import StrEnum


class Admission(StrEnum):
    """Answer to "may this worker start another episode now?"."""

    START = "start"
    RELOAD = "reload"
    """The worker's weights lag the latest announced version by more than max_staleness, or
    (capacity rule) any newer version is announced: episodes start on the latest weights."""
    WAIT = "wait"
    """Too many episodes are in flight (``max_in_flight``), or no capacity is left: an
    episode started now would likely reach the trainer too stale, or make one in flight so."""


@dataclass
class StalenessController:
    """Bounds how far behind the trainer's policy a trained-on action may be.

    ``max_staleness`` is in policy versions; ``max_in_flight`` bounds episodes running at
    once per worker. ``batch_size`` (the trainer's minimum trajectories per update) turns
    the capacity rule on; ``workers`` is how many controllers share its budget (module
    docstring). Without a ``batch_size``, or with announcements that carry no ``consumed``
    count, admission is the version rule alone.
    """

    max_staleness: int = 2
    max_in_flight: int | None = None
    batch_size: int | None = None
    workers: int = 1
    protect_quantile: float = 0.95
    """In-flight episodes younger than this quantile of recent durations are protected."""
    skipped: dict[int, int] = field(default_factory=dict)
    """Stale trajectories skipped by the trainer, counted by their lag in versions."""
    accepted: dict[int, int] = field(default_factory=dict)
    """Trajectories accepted, counted by their lag (the staleness histogram)."""
    started: int = 0
    """Episodes this controller admitted since :attr:`consumed_base` (capacity rule)."""
    consumed_base: int | None = None
    """The trainer's ``consumed`` count when this controller began counting."""
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _running: dict[Hashable, tuple[int, float]] = field(
        default_factory=dict, init=False, repr=False
    )
    """Episodes admitted with a key and not ended yet: key → (version, start time)."""
    _durations: deque[float] = field(
        default_factory=lambda: deque(maxlen=256), init=False, repr=False
    )
    _protect_s: float = field(default=math.inf, init=False, repr=False)
    """Episodes in flight longer than this are stragglers (:attr:`protect_quantile`)."""

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0 (0 = strictly on-policy)")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(
                "batch_size must be >= 1 (the trainer's batch), or None for no capacity rule"
            )
        if self.workers < 1:
            raise ValueError("workers must be >= 1 (how many workers share the capacity)")
        if not 0 < self.protect_quantile <= 1:
            raise ValueError("protect_quantile must be in (0, 1], e.g. 0.95")

    def capacity(
        self, worker_version: int, latest_version: int, consumed: int, in_flight: int = 0
    ) -> int:
        """Episodes this controller may still start on ``worker_version`` weights while the
        trainer is at ``latest_version`` having finished with ``consumed`` trajectories
        (needs ``batch_size``). ``in_flight`` restarts the count if ``consumed`` went back."""
        if self.batch_size is None:
            raise ValueError("capacity needs batch_size (the trainer's batch size)")
        if self.consumed_base is None or consumed < self.consumed_base:
            self.consumed_base, self.started = consumed, in_flight
        oldest = min(self._protected(), default=worker_version)
        versions_left = self.max_staleness + 1 - (latest_version - min(worker_version, oldest))
        budget = consumed - self.consumed_base + versions_left * self.batch_size
        return budget // self.workers - self.started

    def admit_episode(
        self,
        worker_version: int,
        latest_version: int,
        in_flight: int,
        consumed: int | None = None,
        key: Hashable | None = None,
    ) -> Admission:
        """Admission control for a simulation worker holding ``worker_version`` weights
        with ``in_flight`` episodes running, the trainer having announced ``consumed`` (None:
        no count announced, the version rule alone). A START counts the episode as started;
        with a ``key``, also as in flight until :meth:`episode_ended` (straggler protection)."""
        if latest_version - worker_version > self.max_staleness:
            return Admission.RELOAD
        in_flight = max(in_flight, len(self._running))  # admitted, maybe not yet running
        if self.max_in_flight is not None and in_flight >= self.max_in_flight:
            return Admission.WAIT
        if self.batch_size is not None and consumed is not None:
            if worker_version < latest_version:
                return Admission.RELOAD
            if self.capacity(worker_version, latest_version, consumed, in_flight) <= 0:
                if in_flight > 0:
                    return Admission.WAIT
            self.started += 1
            if key is not None:
                self._running[key] = (worker_version, self.clock())
        return Admission.START

    def episode_ended(self, key: Hashable) -> None:
        """The episode admitted with ``key`` ended (unknown keys are ignored)."""
        entry = self._running.pop(key, None)
        if entry is None:
            return
        self._durations.append(self.clock() - entry[1])
        ordered = sorted(self._durations)
        self._protect_s = ordered[min(len(ordered) - 1, int(self.protect_quantile * len(ordered)))]

    def _protected(self) -> list[int]:
        """Versions of the in-flight episodes still worth protecting (not stragglers)."""
        now = self.clock()
        return [v for v, began in self._running.values() if now - began <= self._protect_s]

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

    @property
    def consumed_total(self) -> int:
        """Trajectories the trainer has finished with: accepted or skipped (what it
        announces as ``consumed`` for the workers' capacity rule)."""
        return sum(self.accepted.values()) + self.skipped_total
