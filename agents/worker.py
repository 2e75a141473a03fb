"""Simulation workers: take tasks from ``sf.tasks`` as a consumer group and run them.

Many workers on many machines share one queue by joining the same consumer group. A
worker is a processor on the runtime (``infra.processor``): the tasks of a polled batch run
concurrently on an :class:`ActorPool`, and offsets are committed after the batch's episodes
have ended (at-least-once). A task that makes its run raise (an environment that cannot be
built) is retried, then dead-lettered; the others run. Before each episode starts, admission control
asks :class:`StalenessController` whether the worker's policy lags the latest version
announced on ``sf.policy`` by too much; if so the policy reloads first (hot reload). Given
the trainer's batch size (``StalenessController(batch_size=..., workers=...)``), it also
holds episodes back while the trainer's announced ``consumed`` count leaves no capacity
for them to arrive fresh (reloading first when newer weights would).

A record on ``sf.tasks`` that does not decode, or decodes to something other than a task,
leaves by the runtime's dead-letter path. :class:`EpisodeTracker` is an observer for
``simulate run``, not a stream processor: it reads with the group-less ``TopicReader``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from ..infra import metrics
from ..infra.config import Settings
from ..infra.consumer import Delivery
from ..infra.policy_watch import PolicyWatcher
from ..infra.processor import Context, Processor, Rejected, Runtime
from ..infra.producer import EventProducer
from ..infra.reader import Decoder, TopicMissing, TopicReader
from ..infra.staleness import Admission, StalenessController
from ..infra.topics import wait_for_broker
from ..schemas import (
    EpisodeEnded,
    EpisodeStarted,
    Outcome,
    Task,
    derive_id,
)
from .control import ControlSource
from .env import EnvError, TaskSpec
from .guard import Guard
from .policies.base import Policy
from .pools import ActorPool, EnvPool
from .registry import env_class
from .runner import EpisodeResult, EpisodeRunner

log = logging.getLogger(__name__)
DEFAULT_GROUP = "safactory-sim"


def resolve_task(task: Task) -> TaskSpec:
    """The :class:`TaskSpec` a task event asks for: inline (``spec`` has an
    ``instruction``) or from the env's suite by ``spec["suite_task"]`` / the task id, with
    ``spec["params"]`` (if any) overriding the suite task's params (e.g. ``shuffle``)."""
    if "instruction" in task.spec:
        return TaskSpec.model_validate(task.spec)
    wanted = task.spec.get("suite_task", task.task_id)
    overrides = task.spec.get("params") or {}
    if not isinstance(overrides, dict):
        raise EnvError(f"task {task.task_id}: spec.params must be an object, not {overrides!r}")
    for spec in env_class(task.env).suite():
        if spec.task_id == wanted:
            return spec.model_copy(update={"params": {**spec.params, **overrides}})
    raise EnvError(
        f"task {task.task_id}: env {task.env!r} has no suite task {wanted!r}; set "
        "spec.suite_task to one of its task ids or give an inline spec"
    )


def suite_tasks(
    env: str,
    count: int,
    *,
    group_id: str | None = None,
    seed: int = 0,
    kinds: Iterable[str] = ("capability", "safety"),
) -> list[Task]:
    """``count`` task events cycling through ``env``'s suite (for ``simulate run``)."""
    suite = [s for s in env_class(env).suite() if s.kind in set(kinds)]
    if not suite:
        raise EnvError(f"env {env!r} has no tasks of kinds {list(kinds)}")
    return [
        Task(
            task_id=f"{group_id or 'run'}-{i:05d}-{suite[i % len(suite)].task_id}",
            env=env,
            spec={"suite_task": suite[i % len(suite)].task_id},
            seed=seed + i,
            group_id=group_id,
        )
        for i in range(count)
    ]


class SimulationStats(metrics.Tally):
    """What a simulation worker did (in the metrics registry)."""

    episodes = metrics.Count("sf_simulate_episodes", "episodes ended, per outcome", "outcome")
    reloads = metrics.Count("sf_simulate_policy_reloads", "policy hot reloads")


class SimulationWorker:
    """A consumer-group member that runs the episodes of ``sf.tasks``."""

    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        *,
        concurrency: int = 8,
        pool_size: int | None = None,
        group_id: str = DEFAULT_GROUP,
        staleness: StalenessController | None = None,
        guard: Guard | None = None,
        episode_timeout_s: float | None = 600.0,
        worker_id: str | None = None,
        on_done: Callable[[EpisodeResult], None] | None = None,
        control: ControlSource | None = None,
        approval_timeout_s: float = 300.0,
    ) -> None:
        self.settings, self.policy = settings, policy
        self.control, self.approval_timeout_s = control, approval_timeout_s
        """Where the episodes' halt / pause decisions come from (None: none obeyed)."""
        self.group_id = settings.group(group_id)
        """The task group: ``group_id`` scoped by the topic prefix (``Settings.group``)."""
        self.concurrency = concurrency
        self.pool_size = pool_size or concurrency
        self.staleness = staleness or StalenessController(max_in_flight=concurrency)
        self.guard, self.episode_timeout_s, self.on_done = guard, episode_timeout_s, on_done
        self.worker_id = worker_id or derive_id("worker", 1, id(self))[:12]
        self.producer = EventProducer(settings)
        self.watcher = PolicyWatcher(settings)
        self.stats = SimulationStats()
        # Episodes admitted at once wait for one reload instead of each loading the weights.
        self._reloading = asyncio.Lock()
        self.results: list[EpisodeResult] = []
        self._actors: ActorPool | None = None
        self.runtime = Runtime(
            settings,
            Processor(
                "simulate",
                inputs=("tasks",),
                outputs=("steps", "episodes"),  # the episodes publish their steps themselves
                handle=self._run_task,
                concurrency=concurrency,
                max_records=concurrency,
                group=group_id,
                kafka={"max_poll_interval_ms": self._poll_interval_ms()},
            ),
            producer=self.producer,
        )

    async def start(self) -> None:
        """Connect the producer, follow policy versions, set up the actors (the task group
        is joined by :meth:`run`); a broker still restarting is waited for."""
        await wait_for_broker(self.settings)
        await self.producer.start()
        await self.watcher.start()
        runner = EpisodeRunner(
            self.producer,
            self.policy,
            guard=self.guard,
            timeout_s=self.episode_timeout_s,
            control=self.control,
            approval_timeout_s=self.approval_timeout_s,
        )
        self._actors = ActorPool(runner, {}, self.concurrency, admission=self._admit)

    def _poll_interval_ms(self) -> int:
        """A batch runs its episodes to the end before the next poll: allow for that."""
        episode = self.episode_timeout_s or 600.0
        return int(max(300.0, 2 * episode + 60.0) * 1000)

    def pool(self, env_name: str) -> EnvPool:
        """The worker's pool for one env (pre-warm it with ``await pool.start()``)."""
        assert self._actors is not None, "start() the worker first"
        return self._actors.pool(env_name, self.pool_size)

    async def _admit(self) -> None:
        while True:
            latest = self.watcher.latest.get(self.policy.name)
            latest_version = latest.policy_version if latest else self.policy.version
            assert self._actors is not None
            decision = self.staleness.admit_episode(
                self.policy.version,
                latest_version,
                self._actors.in_flight,
                consumed=latest.consumed if latest else None,
                key=asyncio.current_task(),  # the episode's own task (ActorPool.run_one)
            )
            if decision is Admission.START:
                return
            if decision is Admission.RELOAD and latest is not None:
                async with self._reloading:
                    if latest.policy_version > self.policy.version:  # not done while waiting
                        log.info(
                            "policy %s: reloading v%s -> v%s",
                            self.policy.name,
                            self.policy.version,
                            latest.policy_version,
                        )
                        await self.policy.reload(latest)
                        self.stats.reloads += 1
                continue
            await asyncio.sleep(0.05)

    async def _run_task(self, record: Delivery, ctx: Context) -> None:
        """Run one task's episode (a task that cannot be resolved ends as an episode with
        outcome ``error``; a record that is no task is dead-lettered)."""
        assert self._actors is not None, "start() the worker first"
        task = record.event
        if not isinstance(task, Task):
            raise Rejected(
                f"task: {type(task).__name__} on the task topic; expected {Task.schema_id()}"
            )
        try:
            spec = resolve_task(task)
        except (EnvError, ValueError) as exc:
            self._reject(task, str(exc), ctx)
            return
        self.results.append(await self._actors.run_one(task, spec, self._finished))

    @property
    def reloads(self) -> int:
        """Policy hot reloads so far."""
        return self.stats.reloads

    def _finished(self, result: EpisodeResult) -> None:
        self.staleness.episode_ended(asyncio.current_task())
        self.stats.count("episodes", outcome=result.outcome.value)
        if self.on_done is not None:
            self.on_done(result)

    def _reject(self, task: Task, reason: str, ctx: Context) -> None:
        """A task that cannot run still ends as an episode, with outcome ``error``."""
        log.warning("task %s rejected: %s", task.task_id, reason)
        episode_id = derive_id("rejected-task", 1, task.event_id)
        ctx.emit(
            EpisodeStarted(
                episode_id=episode_id,
                task_id=task.task_id,
                env=task.env,
                group_id=task.group_id,
                policy_name=self.policy.name,
                policy_version=self.policy.version,
                seed=task.seed,
            )
        )
        ctx.emit(
            EpisodeEnded(
                episode_id=episode_id,
                task_id=task.task_id,
                env=task.env,
                group_id=task.group_id,
                outcome=Outcome.ERROR,
                policy_version=self.policy.version,
            )
        )
        self._finished(
            EpisodeResult(
                episode_id=episode_id,
                task_id=task.task_id,
                env=task.env,
                outcome=Outcome.ERROR,
                num_steps=0,
                judgement=None,
                policy_version=self.policy.version,
                error=reason,
            )
        )

    async def run(self, *, idle_timeout: float | None = None) -> None:
        """Join the task group and run tasks until :meth:`request_stop`, SIGINT or SIGTERM
        (or ``idle_timeout`` s without tasks)."""
        assert self._actors is not None, "start() the worker first"
        await self.runtime.serve(idle_timeout=idle_timeout)

    def request_stop(self) -> None:
        """Finish the batch in hand, or cancel its episodes once they have run the stop
        grace past the request (their tasks are not committed: they run again), then
        return from :meth:`run`."""
        self.runtime.request_stop()

    async def stop(self) -> None:
        """Close pools, stop following policies, flush and disconnect."""
        if self._actors is not None:
            await self._actors.close()
        await self.watcher.stop()
        await self.policy.close()
        await self.producer.stop()


class EpisodeTracker:
    """Counts ``EpisodeEnded`` events of one run group on ``sf.episodes``, from the end of
    the topic at :meth:`start` on (a group-less ``TopicReader``: positions are exact,
    whichever worker runs the episodes).

    Why no consumer group: every partition must be pinned at its end offset when
    :meth:`start` returns, before the run's tasks are published; a group joins later, in the
    background, and a new group's "latest" is taken at the join, so the first episodes of a
    fast run would be missed. It commits nothing, keeps no state and dead-letters nothing:
    the auditor and the assembler read ``sf.episodes`` in their groups and dead-letter bad
    records there (a record it cannot decode is not one of this run's ends)."""

    def __init__(self, settings: Settings, group_id: str) -> None:
        self.settings = settings
        self.group_id = group_id
        self.topic = settings.topic("episodes")
        self.ended: list[EpisodeEnded] = []
        self._reader = TopicReader(settings, "episode-tracker")
        self._decoder = Decoder("episode-tracker")

    async def start(self) -> None:
        """Pin every partition at its current end (the client is closed if that fails)."""
        await self._reader.start()
        try:
            try:
                parts = await self._reader.partitions([self.topic])
            except TopicMissing:
                raise EnvError(
                    f"topic {self.topic} does not exist; run `safactory topics create`"
                ) from None
            await self._reader.open(parts, start="end")
        except BaseException:
            await self._reader.stop()
            raise

    async def poll(self, timeout_ms: int = 200) -> list[EpisodeEnded]:
        """New episode ends of this group since the last poll."""
        new = []
        for _, event in self._decoder(await self._reader.read(timeout_ms=timeout_ms)):
            if isinstance(event, EpisodeEnded) and event.group_id == self.group_id:
                new.append(event)
        self.ended.extend(new)
        return new

    async def stop(self) -> None:
        """Disconnect."""
        await self._reader.stop()
