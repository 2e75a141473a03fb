"""``safactory worker simulate``: tasks in from ``sf.tasks``, each task's episode out to
``sf.steps`` and ``sf.episodes``.

Many workers on many machines share one queue by joining the same consumer group. The
function is :class:`~.simulation.Simulation`: each task's episode, admitted against the
policy versions announced on ``sf.policy`` (a :class:`PolicyWatcher` view followed beside
the records). Its episodes publish through the runtime's outputs as they go, and a batch's
offsets are committed once its episodes ended (at-least-once).
"""

from __future__ import annotations

from typing import Any

from ..infra.config import Settings
from ..infra.policy_watch import PolicyWatcher
from ..infra.processor import Processor, Runtime
from ..schemas import derive_id
from .policies.base import Policy
from .simulation import Simulation

DEFAULT_GROUP = "safactory-sim"


class SimulationWorker:
    """The simulation processor: :class:`~.simulation.Simulation` (given ``options``:
    concurrency, pool size, staleness, guard, timeouts, control, ``on_done``) on the runtime."""

    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        *,
        group_id: str = DEFAULT_GROUP,
        worker_id: str | None = None,
        **options: Any,
    ) -> None:
        self.watcher = PolicyWatcher(settings)
        self.sim = Simulation(policy, self.watcher.latest, **options)
        self.pool, self.pool_size = self.sim.pool, self.sim.pool_size
        self.group_id = settings.group(group_id)
        """The task group: ``group_id`` scoped by the topic prefix (``Settings.group``)."""
        self.worker_id = worker_id or derive_id("worker", 1, id(self))[:12]
        self.processor = Processor(
            "simulate",
            inputs=("tasks",),
            outputs=("steps", "episodes"),
            handle=self.sim.run_task,
            concurrency=self.sim.concurrency,
            max_records=self.sim.concurrency,
            group=group_id,
            kafka={"max_poll_interval_ms": self.sim.poll_interval_ms},
        )
        self.runtime = Runtime(settings, self.processor)
        self.producer = self.runtime.producer
        """Connected by :meth:`start` (``simulate run`` enqueues its tasks through it)."""

    async def start(self) -> None:
        """Connect (waiting for a broker still restarting), follow the policy versions and
        set up the actors; the task group is joined by :meth:`run`."""
        await self.runtime.start()
        await self.watcher.start()
        self.sim.start(self.runtime.outputs())

    async def run(self, *, idle_timeout: float | None = None) -> None:
        """Run tasks until :meth:`request_stop`, SIGINT or SIGTERM (or ``idle_timeout``
        seconds without tasks). A stop finishes the batch in hand, or cancels its episodes
        after the stop grace: their tasks are not committed and run again."""
        await self.runtime.serve(idle_timeout=idle_timeout)

    def request_stop(self) -> None:
        """Make :meth:`run` return (see there)."""
        self.runtime.request_stop()

    async def stop(self) -> None:
        """Close the pools and the policy, stop following policies, flush and disconnect."""
        await self.sim.close()
        await self.watcher.stop()
        await self.runtime.stop()
