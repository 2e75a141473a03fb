"""``safactory worker assemble``: steps, episode events and verdicts in (co-partitioned by
episode id), reward-complete trajectories out to ``sf.trajectories`` (keyed by group id,
``sf-policy-version`` = the oldest version in them) and abandon events to ``sf.episodes``.

Each input partition has a fold of its own (``fold.py``). Every event a fold keeps is one
item of its episode in the processor's state (``assembly-state``: key = episode id, item =
event id); a closed episode's events are deleted and a ``closed`` item (the close time)
recognises late duplicates until the fold forgets it. Verdicts a replay published
(``sf-replay``) are passed over by header. The verdict and episode timeouts run on a timer
that fires only for partitions caught up with all three inputs: after a restart, or behind
a burst, an episode whose end was read before its steps is not closed while those steps
still wait in the backlog; restored episodes start their timeouts afresh.
"""

from __future__ import annotations

import logging
import time

from ...infra.config import Settings
from ...infra.consumer import Delivery
from ...infra.processor import Context, Processor, Runtime, Tick, Timer, live_only
from ...infra.store import PartitionState
from ...infra.topics import TopicSpec
from ...schemas import DecodeError, Event, codec
from .fold import AssemblerConfig, AssemblerStats, EpisodeState, TrajectoryAssembler

log = logging.getLogger(__name__)

SOURCES = ("steps", "episodes", "verdicts")
CLOSED = "closed"
"""The item marking an episode closed (its value: when)."""
STATE_TOPIC = TopicSpec(
    "assembly-state",
    "<episode>\\0<event id> | <episode>\\0closed",
    "the assembler's open episodes (one record per event) and recently closed ones",
    cleanup="compact",
    partitions=None,
)


class StateJournal:
    """Writes a fold's state changes into its partition's state, one item per event."""

    def __init__(self, state: PartitionState) -> None:
        self.state = state

    def kept(self, event: Event) -> None:
        record = codec.encode(event)
        self.state.set(event.episode_id, event.event_id, record.value, record.headers)

    def closed(self, state: EpisodeState, at: float) -> None:
        self.state.delete(state.episode_id)
        self.state.set(state.episode_id, CLOSED, repr(at).encode())

    def forgotten(self, episode_id: str) -> None:
        self.state.delete(episode_id, CLOSED)


def restore_fold(
    state: PartitionState, now: float
) -> tuple[dict[str, EpisodeState], dict[str, float], int]:
    """Open and closed episodes from one partition's restored state (timeouts start at
    ``now``), and how many items could not be read back."""
    states: dict[str, EpisodeState] = {}
    closed: dict[str, float] = {}
    unreadable = 0
    for episode in state.keys():
        entries = state.entries(episode)
        if CLOSED in entries:
            closed[episode] = now
            continue
        for value, headers in entries.values():
            try:
                event = codec.decode(value, headers)
            except DecodeError:
                unreadable += 1
                continue
            states.setdefault(event.episode_id, EpisodeState(event.episode_id)).add(event, now)
    return states, closed, unreadable


class AssemblerWorker:
    """The assembly processor: one fold per input partition, fed and ticked."""

    def __init__(
        self,
        settings: Settings,
        config: AssemblerConfig | None = None,
        *,
        tick_every_s: float = 1.0,
        live_lag: int = 1000,
    ) -> None:
        self.config = config or AssemblerConfig()
        self.folds: dict[int, TrajectoryAssembler] = {}
        self.stats = AssemblerStats()
        """What every fold of this worker did (they count into this one view)."""
        self.processor = Processor(
            "assemble",
            inputs=SOURCES,
            outputs=("trajectories", "episodes"),
            state=STATE_TOPIC,
            handle=self.fold,
            timers=(Timer(tick_every_s, self.tick),),
            screen=live_only,
            on_assigned=self.restored,
            on_revoked=self.released,
            on_rollback=self.rebuild,
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

    async def fold(self, record: Delivery, ctx: Context) -> None:
        """Fold one event into its partition's fold; emit what became ready."""
        fold = self.folds.get(record.partition)
        if fold is not None:  # None: revoked meanwhile, its new owner folds it
            for event in fold.apply(record.event, time.time()):
                ctx.emit(event)

    async def tick(self, tick: Tick) -> None:
        """Timer: run the timeouts of caught-up partitions; postpone the others'."""
        now = time.time()
        for number, fold in self.folds.items():
            if number in tick.behind:
                fold.postpone(tick.elapsed)
            else:
                for event in fold.tick(now):
                    tick.ctx.emit(event)

    async def rebuild(self, partitions: set[int], ctx: Context) -> None:
        """A fold raised part-way and its writes were rolled back: rebuild it from them."""
        for number in partitions:
            self.folds.pop(number, None)
        await self.restored(partitions, ctx)

    async def restored(self, partitions: set[int], ctx: Context) -> None:
        """Build the folds of newly assigned partitions from their restored state."""
        now = time.time()
        for number in sorted(partitions - set(self.folds)):
            state = ctx.state_of(number)
            states, closed, unreadable = restore_fold(state, now)
            fold = TrajectoryAssembler(self.config, StateJournal(state), states, closed)
            fold.stats = self.stats
            self.folds[number] = fold
            log.warning(
                "partition %d: restored %d open and %d closed episodes, %d unreadable records",
                number,
                len(states),
                len(closed),
                unreadable,
            )

    async def released(self, partitions: set[int]) -> None:
        """Drop the folds of partitions another instance takes over (their state is
        durable: every change was acknowledged before the offsets behind it committed)."""
        for number in partitions:
            self.folds.pop(number, None)
