"""Rank 0 leads, the other ranks follow: each update rank 0 chose is broadcast to every rank
before it is taken, and before the first one rank 0's weights and optimizer state (see
``distributed.py`` for the ranks themselves)."""

from __future__ import annotations

import time

import torch.distributed as dist

from ..schemas import Trajectory
from .learner import Learner, UpdateMetrics


def _broadcast_state(learner: Learner) -> None:
    """Every rank takes rank 0's weights and optimizer state."""
    for tensor in learner.model.state_dict().values():
        dist.broadcast(tensor, src=0)
    box = [learner.optimizer.state_dict() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    if dist.get_rank() != 0:
        learner.optimizer.load_state_dict(box[0])


def _broadcast_batch(batch: list[Trajectory] | None) -> list[Trajectory] | None:
    """Rank 0's batch (its JSON) on every rank; None: training is over."""
    box = [None if batch is None else [t.model_dump_json() for t in batch]]
    dist.broadcast_object_list(box, src=0)
    return None if box[0] is None else [Trajectory.model_validate_json(t) for t in box[0]]


class RankZeroLearner:
    """Rank 0's learner: each update is sent to every rank first, and taken by all."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self._synced = False
        self.last_broadcast_s = 0.0
        """Seconds the last update spent sending its batch to the other ranks."""

    def __getattr__(self, name: str) -> object:
        return getattr(self.learner, name)  # model, tokenizer, transformer, optimizer, ...

    def update(self, trajectories: list[Trajectory]) -> UpdateMetrics:
        """One update on every rank (rank 0's share computed here)."""
        if not self._synced:
            _broadcast_state(self.learner)
            self._synced = True
        started = time.perf_counter()
        _broadcast_batch(trajectories)
        self.last_broadcast_s = time.perf_counter() - started
        return self.learner.update(trajectories)

    def close(self) -> None:
        """Tell the other ranks training is over (they return from :func:`follow`)."""
        if not self._synced:
            _broadcast_state(self.learner)
        _broadcast_batch(None)


def follow(learner: Learner) -> int:
    """A rank other than 0: take every update rank 0 sends until it says stop; the number
    of updates taken."""
    _broadcast_state(learner)
    done = 0
    while (batch := _broadcast_batch(None)) is not None:
        learner.update(batch)
        done += 1
    return done
