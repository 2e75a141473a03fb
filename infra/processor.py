"""The one stream-processor runtime under every worker.

A processor declares what it reads, what it writes and what it keeps, and gives a function;
a worker module is a short wiring of the two, as a faust agent is::

    AUDIT = Processor("audit", inputs=("steps", "episodes"), outputs=("verdicts", "alerts"),
                      state=CONTEXT, handle=audit.handle)
    Runtime(settings, AUDIT).run()

``handle(record, ctx)`` is called once per decoded record, in partition order;
``handle_batch(records, ctx)`` once per polled batch (a sink writing a batch in one commit).
Either emits events with ``ctx.emit`` and reads and writes keyed state with ``ctx.state``
(the :class:`~.store.PartitionState` of the record's partition); a handler whose events
must be read while it still runs (an episode) publishes them at once through
``runtime.outputs()`` (:class:`Outputs`). Everything else is the runtime's, written once:

* topic creation (inputs, outputs, the changelog, the dead-letter topic), the consumer group
  (scoped by the topic prefix), one producer, SIGINT / SIGTERM, uvloop, metrics;
* decode and the header contract check: a record that does not decode is dead-lettered by
  the consumer and the handler never sees it; a ``screen`` passes over records by header;
* keyed state restored from its co-partitioned compacted changelog before any record of a
  newly assigned partition is handed out; a restore that cannot finish stops the worker;
* poison pills: a handler that raises is retried (``attempts`` in all, its outputs and state
  writes discarded each time); a record that still fails is dead-lettered with the exception
  and the worker goes on with the next one. A batch that fails is handled again record by
  record, so only the records that fail alone are dead-lettered. ``Rejected`` dead-letters
  at once (the record is well-formed but not processable, e.g. a task on the step topic);
  an exception of a ``fatal`` type stops the worker (the environment is broken, not the
  record: the supervisor restarts it and the records are read again);
* at-least-once: a batch's outputs are acknowledged, then its state writes, and only then
  are its input offsets marked for the (interval) commit; a batch settles so while the next
  one is fetched and handled (one batch at most in flight, marked in order), so a busy
  worker's cycle is not its handling plus two round trips to the broker;
* timers, run between batches, and only for the partitions whose inputs are caught up
  (lag within ``live_lag``), so a restart behind a backlog never fires them early;
* garbage collection: startup's objects frozen and, in a worker process (:meth:`Runtime.run`),
  young objects collected between batches on a clock (:class:`~.aio.YoungCollector`), so
  no collection pauses a batch for long;
* clean shutdown: a stop finishes the batch in hand (or abandons it uncommitted after the
  grace), commits what was handled and leaves the group.

Per-record work is kept to decoding and the handler call: counters are added per batch,
outputs are encoded once, and a record handler's records are decoded one at a time just
before its call (a batch's 500 decoded events at once spill a core's L2 cache), so the
runtime costs about a microsecond a record beyond decoding (``bench/bus.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka import ConsumerRecord, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor

from ..schemas import EncodeError, Event, codec
from ..schemas.headers import REPLAY as REPLAY_HEADER
from . import aio, metrics
from .config import Settings
from .consumer import Delivery, GroupConsumer, Polled
from .producer import EventProducer
from .store import ChangelogStore, PartitionState
from .topics import BY_NAME, TopicSpec, create_topics, wait_for_broker

log = logging.getLogger(__name__)

YIELD_EVERY_S = 0.005
"""Longest stretch of handling records without letting the producer send what is ready."""
BATCH_BUDGET_S = 5.0
"""Longest a record handler's batch runs before the runtime cuts it: the records handled so
far are settled and marked, the partitions are sought back to the first record not handled,
and the next poll reads the rest again. Slow handlers (a judge, a model) then still poll,
commit and run timers every few seconds, and a rebalance never finds a long batch in hand."""
RETRY_PAUSE_S = 0.05
"""Pause before a failed handler's next attempt (times the attempt number)."""

RecordHandler = Callable[[Delivery, "Context"], Awaitable[None]]
BatchHandler = Callable[[list[Delivery], "Context"], Awaitable[None]]
Screen = Callable[[ConsumerRecord], bool]


def live_only(record: ConsumerRecord) -> bool:
    """A ``screen`` that passes over replayed records (``sf-replay``): a replay re-judges
    closed history, and a live fold, halt or lesson must never act on it."""
    return not any(key == REPLAY_HEADER for key, _ in record.headers or ())


class Rejected(Exception):
    """Raised by a handler for a record it will never be able to process: dead-lettered at
    once with this message, without retries."""


@dataclass(slots=True)
class Tick:
    """What a timer is told: the time, and which partitions are caught up."""

    elapsed: float
    """Loop seconds since the timer last ran."""
    caught_up: set[int]
    """Input partitions within ``live_lag`` of their end on every input topic."""
    behind: set[int]
    """Assigned input partitions that are not."""
    ctx: Context


@dataclass(frozen=True, slots=True)
class Timer:
    """``fn(tick)`` every ``every_s`` seconds, between batches."""

    every_s: float
    fn: Callable[[Tick], Awaitable[None]]


@dataclass(frozen=True)
class Processor:
    """What a stream processor reads, writes and keeps, and its function (see the module
    docstring). Topic names are catalogue names (``steps``: ``sf.steps`` by default)."""

    name: str
    """The worker kind (metrics ``worker`` label) and, unless ``group`` says otherwise,
    the consumer group."""
    inputs: tuple[str, ...]
    handle: RecordHandler | None = None
    handle_batch: BatchHandler | None = None
    outputs: tuple[str, ...] = ()
    state: TopicSpec | None = None
    """The changelog of the processor's keyed state (compacted, co-partitioned)."""
    owns: tuple[TopicSpec, ...] = ()
    """Topics outside the catalogue it reads or writes (a re-keyed stream), created with it."""
    timers: tuple[Timer, ...] = ()
    group: str | None = None
    screen: Screen | None = None
    """Sees each record before it is decoded; False passes over it (counted)."""
    on_assigned: Callable[[set[int], Context], Awaitable[None]] | None = None
    """Called with newly assigned input partition numbers once their state is restored."""
    on_revoked: Callable[[set[int]], Awaitable[None]] | None = None
    on_rollback: Callable[[set[int], Context], Awaitable[None]] | None = None
    """Called after a failed handler attempt's state writes were rolled back, with the
    partitions it touched: rebuild what the processor keeps in memory from that state."""
    max_records: int = 500
    """Most records in one polled batch (its outputs and state writes are acknowledged once
    a batch). A record handler's records are decoded one at a time as it handles them, so
    a large batch costs no more a record than a small one (``bench/bus.py``)."""
    gather_s: float = 0.0
    """A batch gathers records for up to this long (a sink's fewer, larger writes)."""
    attempts: int = 3
    concurrency: int = 1
    """Records of a batch ``handle`` may work on at once (order within a batch is then not
    kept: for independent records such as tasks; not with keyed state)."""
    fatal: tuple[type[BaseException], ...] = ()
    live_lag: int = 1000
    """Records behind a partition's end within which it counts as caught up (timers)."""
    from_beginning: bool = True
    warm: Callable[[], object] | None = None
    """Loads what the function needs (models, tables) in a thread before the worker joins
    its group: a first record never waits on a cold load while heartbeats wait."""
    kafka: Mapping[str, object] = field(default_factory=dict)
    """Extra consumer options (``max_poll_interval_ms`` for slow batches...)."""

    def __post_init__(self) -> None:
        if (self.handle is None) == (self.handle_batch is None):
            raise ValueError(f"processor {self.name}: give exactly one of handle= or handle_batch=")
        if self.concurrency > 1 and (self.state is not None or self.handle is None):
            raise ValueError(f"processor {self.name}: concurrency needs handle= and no state")


class ProcessorStats(metrics.Published):
    """Records a processor published, per topic (``sf_records_out_total``); what it read,
    handled, retried and dead-lettered is in its consumer's stats."""


class Context:
    """What a handler may do besides returning: emit events, read and write its state."""

    __slots__ = ("_out", "_running", "partition", "record", "state")

    def __init__(self, running: _Running) -> None:
        self._running = running
        self._out: list[tuple[str, Event | tuple[bytes | None, bytes | None, list]]] = []
        self.record: Delivery | None = None
        """The record being handled (None in a batch handler or a timer)."""
        self.partition = -1
        self.state: PartitionState | None = None
        """The keyed state of :attr:`partition` (None without declared state)."""

    def emit(self, event: Event) -> None:
        """Publish ``event`` to its topic once the handler has returned (nothing a failed
        attempt emitted is sent)."""
        self._out.append((event.TOPIC, event))

    def forward(self, topic: str, key: bytes | None, value: bytes | None, headers: list) -> None:
        """Publish a record as it is (bytes) to ``topic`` (a catalogue or state name)."""
        self._out.append((topic, (key, value, headers)))

    def state_of(self, partition: int) -> PartitionState:
        """The keyed state of another input partition (batch handlers, timers)."""
        return self.store.partition(partition)

    @property
    def store(self) -> ChangelogStore:
        """The processor's whole keyed state (every partition this member holds)."""
        store = self._running.store
        if store is None:
            raise RuntimeError(f"processor {self._running.p.name} declares no state")
        return store

    def _bind(self, delivery: Delivery) -> None:
        self.record = delivery
        self.partition = delivery.partition
        store = self._running.store
        if store is not None:
            self.state = store.partition(delivery.partition)


class Outputs:
    """A processor's outputs published at once, each acknowledged before :meth:`publish`
    returns: for a handler whose events must be read while it still runs (an episode's
    steps reach the auditor, and a halt comes back, before the episode ends). What
    :meth:`Context.emit` holds until the handler returns is sent now, so the events of an
    attempt that fails later stay published (their readers deduplicate on event ids).
    Counted with the processor's other outputs (``sf_records_out_total``)."""

    __slots__ = ("_name", "_runtime", "_topics")

    def __init__(self, runtime: Runtime, p: Processor) -> None:
        self._runtime = runtime
        self._name = p.name
        self._topics = {name: runtime.settings.topic(name) for name in p.outputs}

    async def publish(self, event: Event) -> None:
        """Send ``event`` to its topic and wait for the acknowledgement (an event that
        cannot go on the wire raises :class:`~..schemas.EncodeError`)."""
        topic = self._topics.get(event.TOPIC)
        if topic is None:
            raise RuntimeError(f"processor {self._name} emits to {event.TOPIC}, not in its outputs")
        await self._runtime.producer.publish(event, topic=topic)
        self._runtime.stats(self._name).sent(topic)


@dataclass(slots=True)
class Settling:
    """What a handled batch waits for before its offsets are marked."""

    acks: list[asyncio.Future[object]]
    """Its outputs' (and dead letters') acks."""
    writes: int
    """Its state writes: those before this position of the store (:attr:`ChangelogStore.end`)."""
    sent: dict[str, int]
    """Records it published, per topic (counted once settled)."""


class _Running:
    """One processor's consumer, state, context and bookkeeping inside a runtime."""

    def __init__(self, runtime: Runtime, p: Processor) -> None:
        self.runtime = runtime
        self.p = p
        self.settings = runtime.settings
        self.stats = ProcessorStats()
        self.store = (
            ChangelogStore(self.settings, self.settings.topic(p.state.name)) if p.state else None
        )
        self.acks: list[asyncio.Future[object]] = []
        self.sent: dict[str, int] = {}
        self.outputs = {name: self.settings.topic(name) for name in p.outputs}
        if p.state is not None:
            self.outputs[p.state.name] = self.settings.topic(p.state.name)
        self.inputs = {self.settings.topic(name) for name in p.inputs}
        self.ctx = Context(self)
        self.decode_at_fetch = p.handle is None or p.concurrency > 1
        """One record at a time in order decodes each just before its handler runs."""
        self.last_tick = [0.0] * len(p.timers)
        options: dict[str, object] = dict(p.kafka)
        if p.state is not None or len(p.inputs) > 1:
            # co-partitioned inputs: the same partition numbers of every input together
            options.setdefault("partition_assignment_strategy", (RangePartitionAssignor,))
        self.consumer = GroupConsumer(
            p.inputs,
            self.settings.group(p.group or p.name),
            settings=self.settings,
            dlq_producer=runtime.producer,
            from_beginning=p.from_beginning,
            max_records=p.max_records,
            gather_s=p.gather_s,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
            screen=p.screen,
            **options,
        )

    # ------------------------------------------------------------------ rebalance

    async def _assigned(self, assigned: set[TopicPartition]) -> None:
        numbers = {tp.partition for tp in assigned if tp.topic in self.inputs}
        if self.store is not None:
            fresh = numbers - set(self.store.parts)
            counts = await self.store.restore(fresh)
            if fresh:
                log.warning(
                    "%s: restored %d state records of partitions %s",
                    self.p.name,
                    sum(counts.values()),
                    sorted(fresh),
                )
        if self.p.on_assigned is not None:
            await self.p.on_assigned(numbers, self.ctx)

    async def _revoked(self, revoked: set[TopicPartition]) -> None:
        numbers = {tp.partition for tp in revoked if tp.topic in self.inputs}
        if self.store is not None:
            self.store.release(numbers)
        if self.p.on_revoked is not None:
            await self.p.on_revoked(numbers)

    # ------------------------------------------------------------------ one batch

    async def handle(self, polled: Polled) -> None:
        """Handle a polled batch; return once its outputs and then its state writes are
        acknowledged (the consumer marks its offsets after that)."""
        await self.handled(polled)
        await self.settle()

    async def handled(self, polled: Polled) -> None:
        """Run the handler over a polled batch; its outputs and state writes are sent or
        pending (:meth:`detach`, :meth:`settle`)."""
        with metrics.timed():
            if self.p.handle is None:
                if polled.deliveries:
                    await self._batch(polled.deliveries)
                handled = len(polled.deliveries)
            elif self.p.concurrency > 1:
                await self._concurrently(polled.deliveries)
                handled = len(polled.deliveries)
            else:
                handled = await self._records(
                    polled.deliveries or GroupConsumer.decoding(polled), polled
                )
        if handled:
            self.consumer.stats.count("handled", handled)

    def detach(self) -> Settling:
        """What the records handled so far wait for: their outputs' acks and their state
        writes, to settle while the next batch is handled."""
        acks, self.acks = self.acks, []
        sent, self.sent = self.sent, {}
        return Settling(acks, self.store.end if self.store is not None else 0, sent)

    async def settle(self, batch: Settling | None = None) -> None:
        """Wait for the outputs of ``batch`` (by default: everything sent so far), then send
        and wait for its state writes."""
        batch = batch or self.detach()
        if batch.acks:
            await asyncio.gather(*batch.acks)
        if self.store is not None:
            writes = await self.store.flush(self.runtime.producer, batch.writes)
            if writes:
                await asyncio.gather(*writes)
        for topic, n in batch.sent.items():
            self.stats.sent(topic, n)

    async def _records(self, deliveries: Iterable[Delivery], polled: Polled) -> int:
        """Handle each delivery in order, for up to :data:`BATCH_BUDGET_S` (the rest of
        ``polled`` is then cut off: :meth:`_cut`); returns how many were handled."""
        loop = asyncio.get_running_loop()
        clock = loop.time
        since = started = clock()
        ctx, handle, store = self.ctx, self.p.handle, self.store
        assert handle is not None
        count = 0
        handled: dict[tuple[str, int], int] = {}
        for delivery in deliveries:
            now = clock()
            if now - since >= YIELD_EVERY_S:
                if now - started >= BATCH_BUDGET_S:
                    self._cut(polled, handled)
                    break
                await asyncio.sleep(0)  # let the producer hand finished outputs over
                since = clock()
            count += 1
            ctx._bind(delivery)
            mark = store.mark() if store is not None else 0
            try:
                await handle(delivery, ctx)
            except Exception as exc:
                await self._failed(delivery, exc, mark, ctx)
            else:
                if ctx._out:
                    await self._send(ctx)
            handled[(delivery.topic, delivery.partition)] = delivery.offset + 1
        ctx.record, ctx.state = None, None
        return count

    def _cut(self, polled: Polled, handled: dict[tuple[str, int], int]) -> None:
        """End ``polled`` after the records handled so far: each partition is sought back
        to its first record not handled and marked only up to it."""
        consumer = self.consumer
        held = consumer.assignment()
        cut: dict[TopicPartition, int] = {}
        for tp, end in list(polled.offsets.items()):
            upto = handled.get((tp.topic, tp.partition), polled.first.get(tp, end))
            if upto >= end:
                continue
            cut[tp] = upto
            if tp in held:
                consumer.seek(tp, upto)
            if upto > polled.first.get(tp, upto):
                polled.offsets[tp] = upto
            else:
                del polled.offsets[tp]
        polled.undecodable = [  # those past the cut are read (and dead-lettered) again
            (r, e)
            for r, e in polled.undecodable
            if r.offset < cut.get(TopicPartition(r.topic, r.partition), r.offset + 1)
        ]
        consumer.stats.count("batches_cut")
        log.info("%s: batch cut after %g s; the rest is read again", self.p.name, BATCH_BUDGET_S)

    async def _concurrently(self, deliveries: list[Delivery]) -> None:
        handle = self.p.handle
        assert handle is not None
        slots = asyncio.Semaphore(self.p.concurrency)

        async def one(delivery: Delivery) -> None:
            async with slots:
                ctx = Context(self)
                ctx._bind(delivery)
                try:
                    await handle(delivery, ctx)
                except Exception as exc:
                    await self._failed(delivery, exc, 0, ctx)
                else:
                    if ctx._out:
                        await self._send(ctx)

        await asyncio.gather(*(one(d) for d in deliveries))

    async def _batch(self, deliveries: list[Delivery]) -> None:
        handle_batch = self.p.handle_batch
        assert handle_batch is not None
        ctx, store = self.ctx, self.store
        ctx.record, ctx.partition, ctx.state = None, -1, None
        for attempt in range(1, self.p.attempts + 1):
            mark = store.mark() if store is not None else 0
            try:
                await handle_batch(deliveries, ctx)
            except self.p.fatal:
                raise
            except Exception as exc:
                await self._discard(mark, {d.partition for d in deliveries})
                self.consumer.stats.count("handler_retries")
                if attempt < self.p.attempts and not isinstance(exc, Rejected):
                    await asyncio.sleep(RETRY_PAUSE_S * attempt)
                    continue
                if len(deliveries) == 1:
                    await self._dead_letter(deliveries[0], exc)
                    return
                log.warning(
                    "%s: a batch of %d failed %d times (%r): handling it record by record",
                    self.p.name,
                    len(deliveries),
                    attempt,
                    exc,
                )
                for delivery in deliveries:
                    await self._batch([delivery])
                return
            else:
                if ctx._out:
                    await self._send(ctx)
                return

    async def _failed(self, delivery: Delivery, exc: Exception, mark: int, ctx: Context) -> None:
        """A handler raised on ``delivery``: retry, then dead-letter (poison pill)."""
        handle = self.p.handle
        assert handle is not None
        store = self.store
        for attempt in range(1, self.p.attempts + 1):
            if isinstance(exc, self.p.fatal):
                raise exc
            await self._discard(mark, {delivery.partition}, ctx)
            self.consumer.stats.count("handler_retries")
            if isinstance(exc, Rejected) or attempt == self.p.attempts:
                await self._dead_letter(delivery, exc)
                return
            await asyncio.sleep(RETRY_PAUSE_S * attempt)
            ctx._bind(delivery)
            mark = store.mark() if store is not None else 0
            try:
                await handle(delivery, ctx)
            except Exception as again:
                exc = again
            else:
                if ctx._out:
                    await self._send(ctx)
                return

    async def _discard(self, mark: int, partitions: set[int], ctx: Context | None = None) -> None:
        (ctx or self.ctx)._out.clear()
        if self.store is not None:
            self.store.rollback(mark)
        if self.p.on_rollback is not None:
            await self.p.on_rollback(partitions, self.ctx)

    async def _dead_letter(self, delivery: Delivery, exc: Exception) -> None:
        reason = str(exc) if isinstance(exc, Rejected) else f"handler: {exc!r}"
        if not isinstance(exc, Rejected):
            log.warning(
                "%s: %s@%d failed %d times, dead-lettered: %r",
                self.p.name,
                delivery.topic,
                delivery.offset,
                self.p.attempts,
                exc,
            )
        self.acks.append(await self.consumer.dead_letter(delivery, reason[:2000]))

    async def _send(self, ctx: Context) -> None:
        producer = self.runtime.producer
        outputs = self.outputs
        sent = self.sent
        for name, out in ctx._out:
            topic = outputs.get(name)
            if topic is None:
                raise RuntimeError(f"processor {self.p.name} emits to {name}, not in its outputs")
            if isinstance(out, Event):
                try:
                    record = codec.encode(out)
                except EncodeError as exc:
                    self.acks.append(await self._unsendable(out, topic, exc))
                    continue
                key, value, headers = record.key, record.value, record.headers
            else:
                key, value, headers = out
            self.acks.append(await producer.send_raw(topic, key=key, value=value, headers=headers))
            sent[topic] = sent.get(topic, 0) + 1
        ctx._out.clear()

    async def _unsendable(
        self, event: Event, topic: str, exc: EncodeError
    ) -> asyncio.Future[object]:
        """An output that cannot go on the wire (over the record limit): a dead letter by
        reference naming it (origin offset -1), not a crash."""
        episode = getattr(event, "episode_id", None)
        named = f"of episode {episode}" if episode else event.key()[:128]
        reason = f"encode: {type(event).__name__} {named}: {exc}"
        log.error("%s: %s", self.p.name, reason)
        return await self.consumer.dead_letters.send(
            reason, topic, -1, -1, event.key().encode(), event.model_dump_json().encode(), None
        )

    # ------------------------------------------------------------------ timers

    def _due(self, now: float) -> list[int]:
        return [i for i, t in enumerate(self.p.timers) if now - self.last_tick[i] >= t.every_s]

    def timers_due(self) -> bool:
        """Whether a timer is due (:meth:`timers` would run one)."""
        return bool(self._due(asyncio.get_running_loop().time()))

    async def timers(self) -> None:
        """Run the timers that are due, for the partitions that are caught up."""
        now = asyncio.get_running_loop().time()
        due = self._due(now)
        if not due:
            return
        lags = await self.consumer.lag()
        numbers = {tp.partition for tp in lags}
        behind = {tp.partition for tp, lag in lags.items() if lag is None or lag > self.p.live_lag}
        ctx = self.ctx
        ctx.record, ctx.partition, ctx.state = None, -1, None
        for i in due:
            elapsed = now - self.last_tick[i] if self.last_tick[i] else self.p.timers[i].every_s
            self.last_tick[i] = now
            await self.p.timers[i].fn(Tick(elapsed, numbers - behind, behind, ctx))
            if ctx._out:
                await self._send(ctx)
        await self.settle()


class Runtime:
    """Runs processors in one process: one producer and a consumer group per processor."""

    def __init__(self, settings: Settings, *processors: Processor, worker: str | None = None):
        if not processors:
            raise ValueError("give at least one processor")
        self.settings = settings
        self.processors = processors
        self.worker = worker or processors[0].name
        self.producer = EventProducer(settings)
        """Outputs, state and dead letters go through it."""
        self._connected = False
        """Connected ahead of :meth:`serve` by :meth:`start` (then :meth:`stop` ends it)."""
        self._running: list[_Running] = []
        self._stopping = asyncio.Event()
        self.stop_requested = False
        self.stop_grace_s = 3.0
        self.young: aio.YoungCollector | None = None
        """Collects young objects between batches (:class:`~.aio.YoungCollector`), once the
        runtime owns its process (:meth:`run`): the collector's policy is process-wide."""

    async def start(self) -> None:
        """Wait for the broker and connect the producer ahead of :meth:`serve`, for a worker
        that publishes before it joins its group; :meth:`stop` disconnects it."""
        await wait_for_broker(self.settings)
        await self.producer.start()
        self._connected = True

    async def stop(self) -> None:
        """Flush and disconnect the producer :meth:`start` connected."""
        if self._connected:
            self._connected = False
            await self.producer.stop()

    def outputs(self, name: str | None = None) -> Outputs:
        """The outputs of the processor ``name`` (the first one by default), published at
        once (:class:`Outputs`)."""
        p = next((p for p in self.processors if name is None or p.name == name), None)
        if p is None:
            raise KeyError(name)
        return Outputs(self, p)

    def stats(self, name: str | None = None) -> ProcessorStats:
        """The counters of the processor ``name`` (the first one by default)."""
        return self._find(name).stats

    def consumer(self, name: str | None = None) -> GroupConsumer:
        """The group consumer of the processor ``name`` (the first one by default)."""
        return self._find(name).consumer

    def store(self, name: str | None = None) -> ChangelogStore | None:
        """The keyed state of the processor ``name`` (the first one by default)."""
        return self._find(name).store

    def run(self, loglevel: str = "warning", *, idle_timeout: float | None = None) -> None:
        """Run in the foreground until SIGINT or SIGTERM (uvloop unless configured off)."""
        logging.basicConfig(
            level=loglevel.upper(), format="[%(asctime)s] %(levelname)s %(message)s"
        )
        self.young = aio.YoungCollector()
        aio.run(self.serve(idle_timeout=idle_timeout), self.settings)

    def request_stop(self) -> None:
        """Finish (or, after the grace, abandon) the batches in hand, commit and return."""
        self.stop_requested = True
        self._halt()

    def _halt(self) -> None:
        self._stopping.set()
        for running in self._running:
            running.consumer.request_stop()

    @property
    def assigned(self) -> bool:
        """Whether every processor's consumer holds partitions (its group was joined)."""
        return bool(self._running) and all(r.consumer.assignment() for r in self._running)

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested (SIGINT, SIGTERM, :meth:`request_stop`), rather
        than the processors having gone idle or failed."""
        return self.stop_requested

    async def serve(self, *, idle_timeout: float | None = None) -> None:
        """Create missing topics, join the groups and process until asked to stop (or no
        record arrived for ``idle_timeout`` seconds)."""
        metrics.serve(self.settings, self.worker)
        await wait_for_broker(self.settings)
        await create_topics(self.settings, self._topics())
        self._stopping.clear()
        self.stop_requested = False
        async with self._producing():
            self._running = [_Running(self, p) for p in self.processors]
            started: list[GroupConsumer] = []
            watch = aio.LoopWatch()
            watch.start()
            try:
                with aio.stop_on_signals(self.request_stop):
                    await self._warm()
                    for running in self._running:
                        if self.stop_requested:
                            return
                        await running.consumer.start()
                        started.append(running.consumer)
                    aio.tune_gc()
                    log.warning(
                        "%s worker ready: %s",
                        self.worker,
                        ", ".join(r.consumer.group_id for r in self._running),
                    )
                    await self._run_all(idle_timeout)
            finally:
                watch.stop()
                for consumer in started:
                    await consumer.stop()
        log.warning(
            "%s worker stopped: %s; longest event-loop stall %.1f s",
            self.worker,
            [r.stats for r in self._running],
            watch.longest,
        )

    async def _warm(self) -> None:
        """Run each processor's ``warm`` in a thread, before any group is joined."""
        for p in self.processors:
            if p.warm is not None and not self.stop_requested:
                started = time.perf_counter()
                await asyncio.to_thread(p.warm)
                log.warning("%s warmed up in %.1f s", p.name, time.perf_counter() - started)

    @contextlib.asynccontextmanager
    async def offline(self) -> AsyncIterator[Runtime]:
        """The processors without their consumer groups, for driving their functions
        directly on a real broker (:meth:`feed`, :meth:`tick`): topics created, the producer
        connected, nothing consumed or committed."""
        await create_topics(self.settings, self._topics())
        async with self._producing():
            self._running = [_Running(self, p) for p in self.processors]
            try:
                yield self
            finally:
                self._running = []

    async def feed(self, deliveries: list[Delivery], name: str | None = None) -> None:
        """Handle ``deliveries`` as one polled batch of processor ``name`` (inside
        :meth:`offline`): outputs and state writes are acknowledged when it returns."""
        running = self._find(name)
        await running.handle(Polled(list(deliveries), [], {}, 0, len(deliveries)))

    async def tick(
        self,
        elapsed: float,
        name: str | None = None,
        behind: set[int] = frozenset(),  # type: ignore[assignment]
    ) -> None:
        """Run every timer of processor ``name`` once, ``elapsed`` seconds after the last
        run, with the partitions in ``behind`` behind and every other one caught up."""
        running = self._find(name)
        held = set(running.store.parts) if running.store is not None else set()
        ctx = running.ctx
        ctx.record, ctx.partition, ctx.state = None, -1, None
        for timer in running.p.timers:
            await timer.fn(Tick(elapsed, held - set(behind), set(behind), ctx))
            if ctx._out:
                await running._send(ctx)
        await running.settle()

    @contextlib.asynccontextmanager
    async def _producing(self) -> AsyncIterator[EventProducer]:
        if self._connected:
            yield self.producer
            return
        async with self.producer:
            yield self.producer

    def _find(self, name: str | None) -> _Running:
        for running in self._running:
            if name is None or running.p.name == name:
                return running
        raise KeyError(name)

    def _topics(self) -> list[TopicSpec]:
        names: dict[str, TopicSpec] = {"dlq": BY_NAME["dlq"]}
        for p in self.processors:
            for name in (*p.inputs, *p.outputs):
                if name in BY_NAME:
                    names[name] = BY_NAME[name]
            if p.state is not None:
                names[p.state.name] = p.state
            for spec in p.owns:
                names[spec.name] = spec
        return list(names.values())

    async def _run_all(self, idle_timeout: float | None) -> None:
        loops = [asyncio.create_task(self._loop(r, idle_timeout)) for r in self._running]
        try:
            done, _ = await asyncio.wait(loops, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a failed processor stops the worker
            if idle_timeout is not None:
                await asyncio.gather(*loops)
        finally:
            self._halt()
            await asyncio.gather(*loops, return_exceptions=True)

    async def _loop(self, running: _Running, idle_timeout: float | None) -> None:
        """Poll, handle, settle, mark, tick: until stopped; a batch in hand when the stop
        comes gets ``stop_grace_s`` to finish, else it is abandoned uncommitted."""
        loop = asyncio.get_running_loop()
        consumer = running.consumer
        last_record = loop.time()
        stop = asyncio.ensure_future(self._stopping.wait())
        settling: asyncio.Future[None] | None = None
        try:
            while not consumer.stopping:
                polled = await consumer.fetch(
                    timeout_ms=200 if running.p.timers else 500,
                    decode=running.decode_at_fetch,
                )
                if polled is not None:
                    last_record = loop.time()
                    work = asyncio.ensure_future(self._one(running, polled, settling))
                    settling = None
                    await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
                    if not work.done():
                        await asyncio.wait({work}, timeout=self.stop_grace_s)
                    if not work.done():
                        work.cancel()
                        consumer.stats.abandoned_batches += 1
                        log.warning(
                            "%s: batch abandoned %gs after the stop request; it is read again",
                            running.p.name,
                            self.stop_grace_s,
                        )
                        await asyncio.gather(work, return_exceptions=True)
                        return
                    settling = work.result()
                else:
                    await consumer.commit_if_due()
                if settling is not None and (settling.done() or running.timers_due()):
                    settling, done = None, settling
                    await done  # timers see (and flush) state only after the batch settled
                await running.timers()
                if self.young is not None:
                    self.young.tick()
                if idle_timeout is not None and loop.time() - last_record >= idle_timeout:
                    return
        finally:
            stop.cancel()
            if settling is not None:
                await self._last(running, settling)

    async def _last(self, running: _Running, settling: asyncio.Future[None]) -> None:
        """The last batch's settling, given the stop grace; unfinished, it is abandoned
        (its offsets unmarked: it is read again)."""
        await asyncio.wait({settling}, timeout=self.stop_grace_s)
        if not settling.done():
            settling.cancel()
            running.consumer.stats.abandoned_batches += 1
            log.warning("%s: the last batch's acks did not come; it is read again", running.p.name)
        (failed,) = await asyncio.gather(settling, return_exceptions=True)
        if isinstance(failed, Exception):
            log.warning(
                "%s: the last batch did not settle (%r); it is read again", running.p.name, failed
            )

    @staticmethod
    async def _one(
        running: _Running, polled: Polled, previous: asyncio.Future[None] | None
    ) -> asyncio.Future[None] | None:
        """Handle ``polled`` while the batch before it settles; then, once that one is
        settled and marked, settle and mark this one in the background (so its acks and
        state writes overlap the next batch's fetch and handling, and batches are still
        marked in order, each after its outputs and then its state writes were acked)."""
        await running.handled(polled)
        batch = running.detach()
        if previous is not None:
            await previous
        if batch.acks or (running.store is not None and running.store.dirty):
            return asyncio.ensure_future(Runtime._settle(running, polled, batch))
        await Runtime._settle(running, polled, batch)  # nothing to wait for
        return None

    @staticmethod
    async def _settle(running: _Running, polled: Polled, batch: Settling) -> None:
        await running.settle(batch)
        await running.consumer.finish(polled)
