"""A run worked off on this machine (``safactory simulate run``): its tasks cycle an
environment's suite, and a simulation worker runs them (other workers in its group share
the queue) until every episode of the run ended, as its :class:`EpisodeTracker` sees."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager

from ..infra.config import Settings
from ..schemas import AttackPlan, EpisodeEnded, Task, new_id
from .policies import Policy, PolicyConfig, make_policy
from .tasks import suite_tasks
from .tracker import EpisodeTracker
from .worker import SimulationWorker

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


async def run_here(
    settings: Settings,
    env: str,
    count: int,
    config: PolicyConfig,
    *,
    kinds: list[str],
    attack: AttackPlan | None,
    seed: int,
    worker: Callable[[Policy], SimulationWorker],
    acting: Callable[[Policy], AbstractAsyncContextManager[Policy]],
    status: Callable[[str], AbstractContextManager[object]],
    display: Callable[[str, int], AbstractContextManager[Shown]],
) -> list[EpisodeEnded]:
    """Put ``count`` tasks of a new run on the tasks topic (:func:`run_tasks`) and work them
    off here (:func:`work_off`): the configured policy, as ``acting`` wraps it while the run
    lasts, in the simulation ``worker`` built on it. ``status`` is shown while the env's pool
    warms, ``display`` (a title, the count) while the episodes run."""
    run_id = f"run-{new_id()[:10]}"
    work = run_tasks(env, count, run_id, seed=seed, kinds=kinds, attack=attack)
    policy = make_policy(config)  # a policy error before any client is opened
    tracker = EpisodeTracker(settings, run_id)
    await tracker.start()
    try:
        async with acting(policy) as wrapped:
            sim = worker(wrapped)
            await sim.start()
            try:
                with status(f"pre-warming {sim.pool_size} {env} environments"):
                    await sim.pool(env).start()
                await sim.producer.publish_many(work)
                title = f"{env} · {config.kind} · {run_id}"
                return await work_off(sim, tracker, count, display(title, count))
            finally:
                await sim.stop()
    finally:
        await tracker.stop()
