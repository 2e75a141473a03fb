"""The assembler's function on the runtime: one fold (``fold.py``) per input partition,
wired by :mod:`.worker`.

Every event a fold keeps is one item of its episode in the processor's keyed state (key =
episode id, item = event id); a closed episode's events are deleted and a ``closed`` item
(the close time) recognises late duplicates until the fold forgets it. A partition's fold
is rebuilt from that state when the partition is assigned (its timeouts start afresh), and
after a failed handler attempt's writes were rolled back. The timeouts run only for
partitions caught up with their inputs: after a restart, or behind a burst, an episode
whose end was read before its steps is not closed while those steps still wait in the
backlog.
"""

from __future__ import annotations

import logging
import time

from ...infra.consumer import Delivery
from ...infra.processor import Context, Tick
from ...infra.store import PartitionState
from ...schemas import DecodeError, Event, codec
from .fold import AssemblerConfig, AssemblerStats, EpisodeState, TrajectoryAssembler

log = logging.getLogger(__name__)

CLOSED = "closed"
"""The item marking an episode closed (its value: when)."""


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


class LiveAssembly:
    """The assembly processor's function (:meth:`fold`), its timer (:meth:`tick`) and its
    rebalance and rollback hooks: one :class:`TrajectoryAssembler` per input partition."""

    def __init__(self, config: AssemblerConfig | None = None) -> None:
        self.config = config or AssemblerConfig()
        self.folds: dict[int, TrajectoryAssembler] = {}
        self.stats = AssemblerStats()
        """What every fold counts (they count into this one view)."""

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
