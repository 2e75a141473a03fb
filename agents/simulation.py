"""The simulation worker's function: the episode of each task record, on the actor pool.

The tasks of a polled batch run concurrently on an :class:`ActorPool`, each admitted first
(:mod:`.admission`: hot reload, the trainer's capacity). An episode publishes its events
as it goes, through the publisher the actors start with (the runtime's outputs), so the
auditor reads its steps, and a halt comes back, while it runs. A task that cannot be
resolved still ends as an episode, with outcome ``error``; a record that is no task is
rejected (dead-lettered at once); a run that raises (an environment that cannot be built)
fails the handler, which the runtime retries, then dead-letters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..infra import metrics
from ..infra.consumer import Delivery
from ..infra.processor import Context, Rejected
from ..infra.staleness import StalenessController
from ..schemas import EpisodeEnded, EpisodeStarted, Outcome, PolicyVersion, Task, derive_id
from .admission import PolicyAdmission
from .control import ControlSource
from .env import EnvError
from .guard import Guard
from .policies.base import Policy
from .pools import ActorPool, EnvPool
from .runner import EpisodeResult, EpisodeRunner, Publisher
from .tasks import resolve_task

log = logging.getLogger(__name__)


class SimulationStats(metrics.Tally):
    """What a simulation worker did (in the metrics registry)."""

    episodes = metrics.Count("sf_simulate_episodes", "episodes ended, per outcome", "outcome")


class Simulation:
    """Runs the episode of each task (:meth:`run_task`, the processor's ``handle``) with
    ``policy``, admitted against the announcements in ``latest`` (:class:`PolicyAdmission`).
    """

    def __init__(
        self,
        policy: Policy,
        latest: Mapping[str, PolicyVersion],
        *,
        concurrency: int = 8,
        pool_size: int | None = None,
        staleness: StalenessController | None = None,
        guard: Guard | None = None,
        episode_timeout_s: float | None = 600.0,
        on_done: Callable[[EpisodeResult], None] | None = None,
        control: ControlSource | None = None,
        approval_timeout_s: float = 300.0,
    ) -> None:
        self.policy, self.concurrency = policy, concurrency
        self.pool_size = pool_size or concurrency
        staleness = staleness or StalenessController(max_in_flight=concurrency)
        self.admission = PolicyAdmission(policy, staleness, latest)
        self.guard, self.episode_timeout_s, self.on_done = guard, episode_timeout_s, on_done
        self.control, self.approval_timeout_s = control, approval_timeout_s
        """Where the episodes' halt / pause decisions come from (None: none obeyed)."""
        self.stats = SimulationStats()
        self.results: list[EpisodeResult] = []
        self._actors: ActorPool | None = None

    @property
    def poll_interval_ms(self) -> int:
        """A batch runs its episodes to the end before the next poll: allow for that."""
        episode = self.episode_timeout_s or 600.0
        return int(max(300.0, 2 * episode + 60.0) * 1000)

    def start(self, publisher: Publisher) -> None:
        """Set up the actors; their episodes publish through ``publisher``."""
        runner = EpisodeRunner(
            publisher,
            self.policy,
            guard=self.guard,
            timeout_s=self.episode_timeout_s,
            control=self.control,
            approval_timeout_s=self.approval_timeout_s,
        )
        self._actors = ActorPool(runner, {}, self.concurrency, admission=self._admit)

    def pool(self, env_name: str) -> EnvPool:
        """The pool for one env (pre-warm it with ``await pool.start()``)."""
        assert self._actors is not None, "start() the simulation first"
        return self._actors.pool(env_name, self.pool_size)

    async def _admit(self) -> None:
        actors = self._actors
        assert actors is not None
        await self.admission.admit(lambda: actors.in_flight)

    async def run_task(self, record: Delivery, ctx: Context) -> None:
        """Run one task's episode (a task that cannot be resolved ends as an episode with
        outcome ``error``; a record that is no task is rejected)."""
        assert self._actors is not None, "start() the simulation first"
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

    def _finished(self, result: EpisodeResult) -> None:
        self.admission.ended()
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

    async def close(self) -> None:
        """Close the pools and the policy."""
        if self._actors is not None:
            await self._actors.close()
        await self.policy.close()
