"""The stream processor around the fold: ``safactory worker assemble``.

It reads ``sf.steps``, ``sf.episodes`` and ``sf.verdicts`` (co-partitioned by episode id) as
a consumer group, folds each event in, and emits trajectories to ``sf.trajectories`` keyed
by group id with ``sf-policy-version`` = the oldest version in the trajectory (the codec
stamps it), and abandon events to ``sf.episodes``. Records that cannot be decoded go to
``sf.dlq``; verdicts a replay published (header ``sf-replay``) are passed over.

State. Each input partition has a fold of its own. Every event the fold keeps is written,
as one record, to partition ``p`` of the compacted topic ``<prefix>assembly-state`` (key
``<episode>\\0<event id>``); a closed episode gets tombstones for its events and a
``<episode>\\0closed`` marker (recognises late duplicates), tombstoned in turn when the
fold forgets it. The cost of a state write is that of one event, whatever the episode's
length. When the group assigns partitions (start, restart, another instance joining or
dying) the worker reads those state partitions to their end before it folds anything, so
instances in one group share the work and take over each other's episodes.

Delivery. A polled batch is folded, its outputs are sent and acknowledged, then its state
records, and only then are its offsets committed (at-least-once; output ids are
deterministic, so a re-emission after a crash is recognisable). The timer runs in the same
task between batches, so a batch's state never leaves before its outputs.

Timeouts. The verdict and episode timeouts of the fold count only while the worker is
caught up with a partition (its lag on all three inputs within ``live_lag`` records): after
a restart, or behind a burst, an episode whose end was read before its steps is not closed
while those steps still wait in the backlog. Restored episodes start their timeouts afresh.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from ...infra import aio, metrics
from ...infra.changelog import StoredRecord, read_latest
from ...infra.config import Settings
from ...infra.consumer import Delivery, EventConsumer
from ...infra.producer import EventProducer
from ...infra.topics import BY_NAME, TopicSpec, create_topics
from ...schemas import DecodeError, EncodeError, Event, codec
from ...schemas import headers as h
from .fold import AssemblerConfig, AssemblerStats, EpisodeState, TrajectoryAssembler

log = logging.getLogger(__name__)

SOURCES = ("steps", "episodes", "verdicts")
SEP = b"\0"
CLOSED = b"closed"
STATE_TOPIC = TopicSpec(
    "assembly-state",
    "<episode>\\0<event id> | <episode>\\0closed",
    "the assembler's open episodes (one record per event) and recently closed ones",
    cleanup="compact",
    partitions=None,
)


@dataclass
class _Partition:
    """One input partition's fold and the state records it has not written yet."""

    fold: TrajectoryAssembler
    writes: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]


class _StateJournal:
    """Turns the fold's state changes into state-topic records of one partition."""

    def __init__(self, writes: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]):
        self.writes = writes

    def kept(self, event: Event) -> None:
        record = codec.encode(event)
        self.writes.append(
            (_key(event.episode_id, event.event_id), record.value, list(record.headers))
        )

    def closed(self, state: EpisodeState, at: float) -> None:
        for event_id in state.event_ids():
            self.writes.append((_key(state.episode_id, event_id), None, []))
        self.writes.append((_key(state.episode_id, CLOSED.decode()), repr(at).encode(), []))

    def forgotten(self, episode_id: str) -> None:
        self.writes.append((_key(episode_id, CLOSED.decode()), None, []))


def _key(episode_id: str, event_id: str) -> bytes:
    return episode_id.encode() + SEP + event_id.encode()


def _not_a_replay(record: ConsumerRecord) -> bool:
    """A replay's verdicts (``sf-replay``) re-judge closed history: never fold them live."""
    return not any(key == h.REPLAY for key, _ in record.headers or ())


def restore_fold(
    records: dict[bytes, StoredRecord], now: float
) -> tuple[dict[str, EpisodeState], dict[str, float], int]:
    """Open and closed episodes from one state partition's latest records (timeouts start
    at ``now``), and how many records could not be read back."""
    states: dict[str, EpisodeState] = {}
    closed: dict[str, float] = {}
    unreadable = 0
    for key, stored in records.items():
        episode, sep, name = key.partition(SEP)
        if not sep:
            unreadable += 1
            continue
        if name == CLOSED:
            closed[episode.decode()] = now
            continue
        try:
            event = codec.decode(stored.value, stored.headers)
        except DecodeError:
            unreadable += 1
            continue
        state = states.setdefault(event.episode_id, EpisodeState(event.episode_id))
        state.add(event, now)
    for episode in closed:
        states.pop(episode, None)
    return states, closed, unreadable


class AssemblerWorker:
    """Consumes the three input topics as a group member and emits trajectories."""

    def __init__(
        self,
        settings: Settings,
        config: AssemblerConfig | None = None,
        *,
        tick_every_s: float = 1.0,
        live_lag: int = 1000,
    ) -> None:
        self.settings = settings
        self.config = config or AssemblerConfig()
        self.tick_every_s = tick_every_s
        self.live_lag = live_lag
        self.state_topic = settings.topic(STATE_TOPIC.name)
        self.parts: dict[int, _Partition] = {}
        self._stats = AssemblerStats()
        """What every fold this worker ran did (the folds count into the same series)."""
        self._producer: EventProducer | None = None
        self._consumer: EventConsumer | None = None

    @property
    def stats(self) -> AssemblerStats:
        """What every fold this worker ran did."""
        return self._stats

    def run(self, loglevel: str = "warning") -> None:
        """Run in the foreground until SIGINT or SIGTERM."""
        logging.basicConfig(
            level=loglevel.upper(), format="[%(asctime)s] %(levelname)s %(message)s"
        )
        aio.run(self.serve(), self.settings)

    async def serve(self, *, idle_timeout: float | None = None) -> AssemblerStats:
        """Create missing topics, join the group and assemble until asked to stop."""
        metrics.serve(self.settings, "assemble")
        specs = [BY_NAME[n] for n in (*SOURCES, "trajectories", "dlq")]
        await create_topics(self.settings, [*specs, STATE_TOPIC])
        async with EventProducer(self.settings) as producer:
            self._producer = producer
            consumer = EventConsumer(
                SOURCES,
                self.settings.group("assemble"),
                batch_handler=self._fold_batch,
                settings=self.settings,
                dlq_producer=producer,
                on_assigned=self._restore,
                on_revoked=self._release,
                max_records=1000,
                screen=_not_a_replay,
                partition_assignment_strategy=(RangePartitionAssignor,),
                session_timeout_ms=10_000,
                heartbeat_interval_ms=1_000,
            )
            self._consumer = consumer
            with aio.stop_on_signals(consumer.request_stop):
                async with consumer:
                    log.warning("assembler ready: group %s", self.settings.group("assemble"))
                    await self._loop(consumer, idle_timeout)
        log.warning("assembler stopped: %s", self.stats)
        return self.stats

    async def _loop(self, consumer: EventConsumer, idle_timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        last_tick = last_record = loop.time()
        while not consumer.stopping:
            if await consumer.poll_once(timeout_ms=min(500, int(self.tick_every_s * 1000))):
                last_record = loop.time()
            now = loop.time()
            if now - last_tick >= self.tick_every_s:
                await self._tick(now - last_tick)
                last_tick = now
            if idle_timeout is not None and now - last_record >= idle_timeout:
                break

    async def _fold_batch(self, deliveries: list[Delivery]) -> None:
        """Fold a polled batch; return once its outputs and then its state are acknowledged."""
        now = time.time()
        outputs: list[tuple[int, Event]] = []
        for delivery in deliveries:
            part = self.parts.get(delivery.partition)
            if part is None:  # revoked meanwhile: its new owner folds it
                continue
            outputs += [(delivery.partition, e) for e in part.fold.apply(delivery.event, now)]
        await self._emit(outputs)

    async def _tick(self, elapsed: float) -> None:
        """Run the timeouts of every partition that is caught up; postpone the others'."""
        assert self._consumer is not None
        behind = {
            tp.partition
            for tp, lag in (await self._consumer.lag()).items()
            if lag is None or lag > self.live_lag
        }
        now = time.time()
        outputs: list[tuple[int, Event]] = []
        for number, part in list(self.parts.items()):
            if number in behind:
                part.fold.postpone(elapsed)
            else:
                outputs += [(number, e) for e in part.fold.tick(now)]
        await self._emit(outputs)

    async def _emit(self, outputs: list[tuple[int, Event]]) -> None:
        """Send outputs and wait for their acks; then the state records behind them."""
        assert self._producer is not None and self._consumer is not None
        acks = []
        for _, event in outputs:
            try:
                record = codec.encode(event)
            except EncodeError as exc:
                acks.append(await self._too_large(event, exc))
                continue
            topic = self.settings.topic(event.TOPIC)
            acks.append(
                await self._producer.send_raw(
                    topic, key=record.key, value=record.value, headers=list(record.headers)
                )
            )
            self._stats.sent(topic)
        await asyncio.gather(*acks)
        acks = []
        for number, part in list(self.parts.items()):
            writes, part.writes[:] = list(part.writes), []
            for key, value, headers in writes:
                acks.append(
                    await self._producer.send_raw(
                        self.state_topic, key=key, value=value, headers=headers, partition=number
                    )
                )
        await asyncio.gather(*acks)

    async def _too_large(self, event: Event, exc: EncodeError) -> asyncio.Future[object]:
        """An output that cannot go on the wire (over the record limit): a dead letter by
        reference naming it (its start, the reason, its size), not a crash."""
        assert self._consumer is not None
        reason = f"encode: {type(event).__name__} of episode {event.episode_id}: {exc}"
        log.error(reason)
        return await self._consumer.send_dead_letter(
            reason,
            self.settings.topic(event.TOPIC),
            -1,
            -1,
            event.episode_id.encode(),
            event.model_dump_json().encode(),
            None,
        )

    async def _restore(self, assigned: set[TopicPartition]) -> None:
        """Read the state of newly assigned partitions (the consumer hands out their records
        only after this returned)."""
        numbers = {tp.partition for tp in assigned} - set(self.parts)
        latest = await read_latest(self.settings, self.state_topic, numbers)
        now = time.time()
        for number, records in latest.items():
            writes: list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]] = []
            states, closed, unreadable = restore_fold(records, now)
            fold = TrajectoryAssembler(self.config, _StateJournal(writes), states, closed)
            self.parts[number] = _Partition(fold, writes)
            log.warning(
                "partition %d: restored %d open and %d closed episodes, %d unreadable records",
                number,
                len(states),
                len(closed),
                unreadable,
            )

    async def _release(self, revoked: set[TopicPartition]) -> None:
        """Drop the folds of partitions another instance takes over (their state is
        durable: every change was acknowledged before the offsets behind it committed)."""
        for number in sorted({tp.partition for tp in revoked} & set(self.parts)):
            self.parts.pop(number)
