"""A run worked off on this machine (``safactory simulate run``): its tasks cycle an
environment's suite, and a simulation worker runs them (other workers in its group share
the queue) until every episode of the run ended, as its :class:`EpisodeTracker` sees."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager

from ..schemas import AttackPlan, EpisodeEnded, Task
from .worker import EpisodeTracker, SimulationWorker, suite_tasks

Shown = Callable[[list[EpisodeEnded]], None]
"""Shows the run's episode ends so far (a progress bar)."""


def run_tasks(
    env: str, count: int, run_id: str, *, seed: int, kinds: list[str], attack: AttackPlan | None
) -> list[Task]:
    """``count`` tasks of run ``run_id`` cycling ``env``'s suite (tasks of ``kinds``, seeds
    from ``seed`` on), each with the ``attack`` plan when one is given."""
    work = suite_tasks(env, count, group_id=run_id, seed=seed, kinds=kinds)
    return work if attack is None else [t.model_copy(update={"attack": attack}) for t in work]


async def work_off(
    worker: SimulationWorker,
    tracker: EpisodeTracker,
    count: int,
    display: AbstractContextManager[Shown],
) -> list[EpisodeEnded]:
    """Run ``worker`` until ``count`` episodes ``tracker`` follows ended, showing the ends
    after each poll inside ``display``; then stop it. A worker that stops first ends the
    wait (its error raised)."""
    consume = asyncio.create_task(worker.run())
    with display as shown:
        while len(tracker.ended) < count:
            if consume.done():
                consume.result()
                break
            await tracker.poll()
            shown(tracker.ended)
    worker.request_stop()
    await consume
    return tracker.ended
