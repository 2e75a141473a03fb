"""Re-execute: run past episodes again on a chosen policy version and compare them.

An episode is rebuilt from the log: its ``EpisodeStarted`` carries the task id, env, seed
and attack plan the runner used; the task's spec comes from the original ``Task`` on the
tasks topic. The rebuilt tasks (new task ids ``<original>~<replay id>``, all in the task
group named by the replay id) go to the tasks topic, where the simulation workers run them
like any task; the replay follows the episodes topic from its end for their episodes. Both
sides are then judged by the same checker set in-process (``ReAuditor`` as a dry run), so
"first unsafe step" means the same thing before and after whether or not a live auditor
ran; unsafe is the environment's own ground truth (``EpisodeEnded.safety``), reward the
assembled trajectory's where both sides have one, else the environment's task reward.
``safactory replay run`` drives :func:`rerun` (:func:`prepare`, :func:`reexecute`,
:func:`outcome`) and :func:`summary`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

from ...infra.config import Settings
from ...infra.policy_watch import PolicyWatcher
from ...infra.producer import EventProducer
from ...infra.reader import Decoder, TopicReader
from ...schemas import (
    Alert,
    EpisodeEnded,
    EpisodeStarted,
    Severity,
    Task,
    Trajectory,
    derive_id,
)
from ..audit.engine import AuditEngine
from .audit import AuditWindow, ReAuditor, is_replay
from .window import read_window

PRODUCER = "safactory.replay.run"


Display = Callable[[int, int | None], AbstractContextManager[Callable[[int], None]]]
"""Shows the re-runs (how many, on which version) while inside; yields a callback of how
many more have ended (a progress bar's advance)."""


class ReplayRunError(RuntimeError):
    """Episodes that cannot be re-run, or that did not come back in time; says which."""


@dataclass
class Original:
    """A past episode as the log holds it."""

    started: EpisodeStarted
    ended: EpisodeEnded
    task: Task | None = None
    alerts: list[Alert] = field(default_factory=list)


@dataclass
class Comparison:
    """One episode before and after."""

    episode_before: str
    episode_after: str | None
    task_id: str
    env: str
    version_before: int
    version_after: int | None
    unsafe_before: bool | None
    unsafe_after: bool | None
    reward_before: float
    reward_after: float | None
    reward_source: str
    """``trajectory`` (both sides assembled) or ``task`` (the environment's task reward)."""
    first_unsafe_before: int | None
    first_unsafe_after: int | None
    violations_after: list[str] = field(default_factory=list)


async def _read_all(settings: Settings, topic: str, keep: Callable[[Any], bool]) -> list[Any]:
    out = []
    decoder = Decoder("replay")
    async for batch in read_window(settings, settings.topic(topic)):
        out.extend(e for _, e in decoder(r for r in batch if not is_replay(r)) if keep(e))
    return out


async def select(
    settings: Settings,
    *,
    episodes: set[str] | None = None,
    envs: set[str] | None = None,
    with_alert: Severity | None = None,
    unsafe: bool = False,
    limit: int | None = None,
) -> list[Original]:
    """Ended episodes matching every filter given, oldest first, with their tasks."""
    found: dict[str, Original] = {}
    starts: dict[str, EpisodeStarted] = {}
    for event in await _read_all(settings, "episodes", lambda e: True):
        if isinstance(event, EpisodeStarted):
            starts[event.episode_id] = event
        elif isinstance(event, EpisodeEnded) and event.episode_id in starts:
            found[event.episode_id] = Original(starts[event.episode_id], event)
    alerts = await _read_all(settings, "alerts", lambda e: isinstance(e, Alert))
    for alert in alerts:
        if alert.episode_id in found:
            found[alert.episode_id].alerts.append(alert)
    chosen = [
        o
        for o in found.values()
        if (episodes is None or o.started.episode_id in episodes)
        and (envs is None or o.started.env in envs)
        and (with_alert is None or any(a.severity.rank >= with_alert.rank for a in o.alerts))
        and (not unsafe or bool(o.ended.safety and o.ended.safety.unsafe))
        and "~replay-" not in o.started.task_id
    ][:limit]
    wanted = {o.started.task_id for o in chosen}
    tasks = {
        t.task_id: t
        for t in await _read_all(
            settings, "tasks", lambda e: isinstance(e, Task) and e.task_id in wanted
        )
    }
    for original in chosen:
        original.task = tasks.get(original.started.task_id)
    return chosen


def rebuild(original: Original, replay_id: str) -> Task:
    """The task that runs ``original`` again: same env, spec, seed and attack plan."""
    started = original.started
    if original.task is None:
        raise ReplayRunError(
            f"episode {started.episode_id}: its task {started.task_id!r} is no longer on the "
            "tasks topic (retention), so its spec is unknown; choose episodes with --episode "
            "whose tasks are still there"
        )
    suffix = f"~{replay_id}"
    return Task(
        event_id=derive_id(PRODUCER, 1, replay_id, started.episode_id),
        task_id=started.task_id[: 128 - len(suffix)] + suffix,
        env=started.env,
        spec=original.task.spec,
        seed=started.seed,
        attack=started.attack,
        group_id=replay_id,
        policy=original.task.policy,
    )


async def latest_version(settings: Settings, policy_name: str) -> int | None:
    """The newest version announced for ``policy_name`` (None: none announced)."""
    watcher = PolicyWatcher(settings)
    await watcher.start(catch_up_s=10.0)
    try:
        known = watcher.latest.get(policy_name)
        return known.policy_version if known else None
    finally:
        await watcher.stop()


async def reexecute(
    settings: Settings,
    originals: list[Original],
    replay_id: str,
    *,
    timeout_s: float,
    on_ended: Callable[[int], None] = lambda n: None,
) -> dict[str, EpisodeEnded]:
    """Publish the rebuilt tasks and wait for their episodes to end (``on_ended``: how many
    more ended, after each read); original episode id → the new episode's end.
    :class:`ReplayRunError` names the ones missing at the timeout."""
    tasks = {rebuild(o, replay_id).task_id: o for o in originals}
    async with TopicReader(settings, "replay-run") as tracker:
        # pinned at the end of sf.episodes before the tasks go out: no end is missed
        await tracker.open(await tracker.partitions([settings.topic("episodes")]), start="end")
        async with EventProducer(settings) as producer:
            await producer.publish_many([rebuild(o, replay_id) for o in originals])
        deadline = time.monotonic() + timeout_s
        ended: dict[str, EpisodeEnded] = {}
        decoder = Decoder("replay-run")
        while len(ended) < len(tasks):
            before = len(ended)
            for _, end in decoder(await tracker.read(timeout_ms=500)):
                if isinstance(end, EpisodeEnded) and end.task_id in tasks:
                    ended[tasks[end.task_id].started.episode_id] = end
            on_ended(len(ended) - before)
            if time.monotonic() > deadline:
                missing = [
                    o.started.episode_id
                    for o in tasks.values()
                    if o.started.episode_id not in ended
                ]
                raise ReplayRunError(
                    f"{len(missing)} of {len(tasks)} re-run episodes did not end within "
                    f"{timeout_s:g}s (first: {missing[0]}); is a simulation worker running on "
                    f"{settings.topic('tasks')}? start one with `safactory simulate worker`"
                )
        return ended


async def trajectories(settings: Settings, episodes: set[str]) -> dict[str, Trajectory]:
    """Assembled trajectories of ``episodes`` on the trajectories topic so far."""

    def wanted(event: object) -> bool:
        return isinstance(event, Trajectory) and event.episode_id in episodes

    found = await _read_all(settings, "trajectories", wanted)
    return {t.episode_id: t for t in found}


async def first_unsafe_steps(
    settings: Settings, engine: AuditEngine, episodes: set[str], replay_id: str
) -> dict[str, int]:
    """Episode → first step the engine alerts on, judged now (both sides alike)."""
    auditor = ReAuditor(settings, engine, replay_id=replay_id)  # no producer: publishes nothing
    diff = await auditor.run(AuditWindow(episodes=frozenset(episodes)))
    first: dict[str, int] = {}
    for alert in [*diff.raised, *diff.kept]:
        if alert.step_index is not None:
            first[alert.episode_id] = min(
                first.get(alert.episode_id, alert.step_index), alert.step_index
            )
    return first


async def prepare(
    settings: Settings,
    replay_id: str,
    *,
    episodes: set[str] | None = None,
    envs: set[str] | None = None,
    with_alert: Severity | None = None,
    unsafe: bool = False,
    limit: int | None = None,
    policy_version: int | None = None,
) -> tuple[list[Original], int | None]:
    """The episodes to re-run (:func:`select`), every task rebuildable before anything is
    published, and the version to run (default: the latest announced for their policy)."""
    originals = await select(
        settings, episodes=episodes, envs=envs, with_alert=with_alert, unsafe=unsafe, limit=limit
    )
    if not originals:
        raise ReplayRunError("no ended episode matches the filters")
    for original in originals:
        rebuild(original, replay_id)
    if policy_version is None:
        policy_version = await latest_version(settings, originals[0].started.policy_name)
    return originals, policy_version


async def outcome(
    settings: Settings,
    engine: AuditEngine,
    originals: list[Original],
    ended: dict[str, EpisodeEnded],
    replay_id: str,
    *,
    trajectory_wait_s: float = 0.0,
) -> list[Comparison]:
    """The originals compared with their re-runs (:func:`compare`), after waiting up to
    ``trajectory_wait_s`` for every side's trajectory."""
    episodes = {o.started.episode_id for o in originals} | {e.episode_id for e in ended.values()}
    deadline = time.monotonic() + trajectory_wait_s
    trajs = await trajectories(settings, episodes)
    while len(trajs) < len(episodes) and time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        trajs = await trajectories(settings, episodes)
    first = await first_unsafe_steps(settings, engine, episodes, replay_id)
    return compare(originals, ended, trajs, first)


async def rerun(
    settings: Settings,
    engine: AuditEngine,
    replay_id: str,
    *,
    episodes: Iterable[str] | None = None,
    envs: Iterable[str] | None = None,
    with_alert: Severity | None = None,
    unsafe: bool = False,
    limit: int | None = None,
    policy_version: int | None = None,
    timeout_s: float,
    trajectory_wait_s: float = 0.0,
    display: Display,
) -> tuple[list[Comparison], int | None]:
    """:func:`prepare`, :func:`reexecute` inside ``display`` and :func:`outcome`: the
    comparisons, and the version the re-runs were asked to use."""
    originals, version = await prepare(
        settings,
        replay_id,
        episodes=set(episodes) if episodes else None,
        envs=set(envs) if envs else None,
        with_alert=with_alert,
        unsafe=unsafe,
        limit=limit,
        policy_version=policy_version,
    )
    with display(len(originals), version) as on_ended:
        new = await reexecute(
            settings, originals, replay_id, timeout_s=timeout_s, on_ended=on_ended
        )
    rows = await outcome(
        settings, engine, originals, new, replay_id, trajectory_wait_s=trajectory_wait_s
    )
    return rows, version


def compare(
    originals: list[Original],
    ended: dict[str, EpisodeEnded],
    trajs: dict[str, Trajectory],
    first_unsafe: dict[str, int],
) -> list[Comparison]:
    """One row per original episode."""
    rows = []
    for o in originals:
        before, after = o.ended, ended.get(o.started.episode_id)
        t_before = trajs.get(before.episode_id)
        t_after = trajs.get(after.episode_id) if after else None
        both = t_before is not None and t_after is not None
        rows.append(
            Comparison(
                episode_before=before.episode_id,
                episode_after=after.episode_id if after else None,
                task_id=o.started.task_id,
                env=o.started.env,
                version_before=o.started.policy_version,
                version_after=after.policy_version if after else None,
                unsafe_before=before.safety.unsafe if before.safety else None,
                unsafe_after=after.safety.unsafe if after and after.safety else None,
                reward_before=t_before.reward if both and t_before else before.task_reward,
                reward_after=(
                    t_after.reward if both and t_after else (after.task_reward if after else None)
                ),
                reward_source="trajectory" if both else "task",
                first_unsafe_before=first_unsafe.get(before.episode_id),
                first_unsafe_after=first_unsafe.get(after.episode_id) if after else None,
                violations_after=list(after.safety.violations) if after and after.safety else [],
            )
        )
    return rows


def summary(rows: list[Comparison], replay_id: str, version: int | None) -> dict[str, Any]:
    """The JSON report: totals and one entry per episode."""
    done = [r for r in rows if r.episode_after is not None]

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    return {
        "replay_id": replay_id,
        "policy_version": version,
        "episodes": len(rows),
        "unsafe_before": sum(bool(r.unsafe_before) for r in rows),
        "unsafe_after": sum(bool(r.unsafe_after) for r in done),
        "alerted_before": sum(r.first_unsafe_before is not None for r in rows),
        "alerted_after": sum(r.first_unsafe_after is not None for r in done),
        "mean_reward_before": mean([r.reward_before for r in rows]),
        "mean_reward_after": mean([r.reward_after for r in done if r.reward_after is not None]),
        "versions_run": sorted({r.version_after for r in done if r.version_after is not None}),
        "rows": [asdict(r) for r in rows],
    }


def off_version(rows: list[Comparison], version: int | None) -> list[Comparison]:
    """The re-runs that ran another version than ``version`` (none when it is None)."""
    return [r for r in rows if version is not None and r.version_after not in (None, version)]
