"""``safactory worker assemble``: steps, episode events and verdicts in (co-partitioned by
episode id), reward-complete trajectories out to ``sf.trajectories`` (keyed by group id,
``sf-policy-version`` = the oldest version in them) and abandon events to ``sf.episodes``.

The function, its timer and its folds are :class:`~.live.LiveAssembly`; its state is the
changelog ``assembly-state`` (key = episode id, item = event id). Verdicts a replay
published (``sf-replay``) are passed over by header. The timeouts run on a timer that fires
only for partitions caught up with all three inputs.
"""

from __future__ import annotations

from ...infra.config import Settings
from ...infra.processor import Processor, Runtime, Timer, live_only
from ...infra.topics import TopicSpec
from .fold import AssemblerConfig, AssemblerStats
from .live import LiveAssembly

SOURCES = ("steps", "episodes", "verdicts")
STATE_TOPIC = TopicSpec(
    "assembly-state",
    "<episode>\\0<event id> | <episode>\\0closed",
    "the assembler's open episodes (one record per event) and recently closed ones",
    cleanup="compact",
    partitions=None,
)


class AssemblerWorker:
    """The assembly processor: :class:`~.live.LiveAssembly` on the runtime."""

    def __init__(
        self,
        settings: Settings,
        config: AssemblerConfig | None = None,
        *,
        tick_every_s: float = 1.0,
        live_lag: int = 1000,
    ) -> None:
        self.live = LiveAssembly(config)
        self.stats: AssemblerStats = self.live.stats
        """What every fold of this worker did."""
        self.processor = Processor(
            "assemble",
            inputs=SOURCES,
            outputs=("trajectories", "episodes"),
            state=STATE_TOPIC,
            handle=self.live.fold,
            timers=(Timer(tick_every_s, self.live.tick),),
            screen=live_only,
            on_assigned=self.live.restored,
            on_revoked=self.live.released,
            on_rollback=self.live.rebuild,
            max_records=1000,
            live_lag=live_lag,
        )
        self.runtime = Runtime(settings, self.processor)

    def run(self, loglevel: str = "warning") -> None:
        """Run in the foreground until SIGINT or SIGTERM."""
        self.runtime.run(loglevel)

    async def serve(self, *, idle_timeout: float | None = None) -> AssemblerStats:
        """Assemble until asked to stop (or idle for ``idle_timeout`` seconds)."""
        await self.runtime.serve(idle_timeout=idle_timeout)
        return self.stats
