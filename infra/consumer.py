"""The event consumer: decode, hand good events on, dead-letter the rest, commit after.

Anything that cannot be decoded or validated goes to the dead-letter topic with ``sf-error``,
its origin and this consumer's group (``sf-origin-group``) in headers, and the consumer
carries on. A handler that keeps failing after retries sends its record to the dead-letter
topic too, so one poison record never stalls a partition. Offsets are committed only after
every record up to them was handled or dead-lettered and those dead letters were
acknowledged: delivery is at-least-once. Commits are batched on an interval
(``commit_interval_ms``; 0 = after every poll), on rebalance and on stop, since one commit
round trip costs more than decoding hundreds of records.

A ``screen`` sees each record before it is decoded and may pass over it, counted (consumers
route and filter on headers without decoding payloads). An owner that keeps its offsets
elsewhere (the trainer, in the checkpoint beside its model) gives ``store_offsets``: the
handled offsets go there instead of to the group, and ``on_assigned`` positions the
partitions with :meth:`EventConsumer.seek`.

A stop request (:meth:`EventConsumer.request_stop`, e.g. on SIGTERM through
``infra.aio.stop_on_signals``) lets the batch in hand finish for ``stop_grace_s``, then
abandons it: its offsets stay uncommitted, so it is read again by whoever consumes next;
:meth:`EventConsumer.stop` then commits what was handled and leaves the group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import (
    CommitFailedError,
    IllegalGenerationError,
    IllegalStateError,
    KafkaError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

from ..schemas import DecodeError, Event, codec
from . import metrics
from .aio import cancelled_by_someone_else, stop_client
from .config import Settings, get_settings
from .dead_letters import DeadLetters, DeadLetterStats
from .producer import EventProducer

log = logging.getLogger(__name__)


GROUP_MOVED_ON = (
    CommitFailedError,
    UnknownMemberIdError,
    IllegalGenerationError,
    RebalanceInProgressError,
    IllegalStateError,
)
"""What a commit raises when the group rebalanced under it: the member's session expired
(its loop was held past the session timeout, the process was stopped) or the group is
reassigning. Normal, never fatal: the offsets of partitions no longer held are dropped (the
new owner reads those records again; ids are deterministic and sinks deduplicate), the rest
are committed once the member has rejoined. aiokafka raises ``IllegalStateError`` for a
partition it no longer holds, or while it rejoins ("No partitions assigned")."""


FETCH_MAX_WAIT_MS = 100
"""How long the broker holds a fetch that found no new records. aiokafka keeps one fetch in
flight per broker, for the partitions whose records were all handed out; while others still
hold records, that fetch may be for quiet partitions only (an input like ``sf.episodes``),
and the busy ones are not fetched again until it returns. At aiokafka's 500 ms the audit
worker at 2,000 steps/s idled 200 ms at a time behind a backlog and stayed ~1 s behind for
whole runs (``bench/audit_latency.py``: p50 600 ms, p99 1.2 s in about one run of three)."""


PARTITION_FETCH_BYTES = 1024 * 1024
"""The bytes a fetch asks of each partition (the Kafka clients' default). A larger record
still comes: a broker answers Fetch v3 and later with the first record batch whole, however
large (a test consumes one at the payload limit). 16 MiB, as before, cost 15-20 % more CPU
a consumed record (``bench/bus.py``): each response was up to 16 MiB per partition."""


@dataclass(slots=True)
class Delivery:
    """A decoded event and where it came from."""

    event: Event
    topic: str
    partition: int
    offset: int
    key: bytes | None
    headers: Sequence[tuple[str, bytes]]
    value: bytes | None = None
    """The record's payload as received (sinks store it without re-encoding)."""

    @classmethod
    def of(cls, record: ConsumerRecord, event: Event) -> Delivery:
        """The delivery of ``event``, decoded from ``record``."""
        return cls(
            event,
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.headers,
            record.value,
        )


Handler = Callable[[Delivery], Awaitable[None]]
BatchHandler = Callable[[list[Delivery]], Awaitable[None]]
Screen = Callable[[ConsumerRecord], bool]
"""Sees a record before it is decoded; False passes over it (counted in ``screened``)."""
StoreOffsets = Callable[[dict[TopicPartition, int]], None]
"""Takes the next offset to read per partition once a batch up to it was handled."""


class ConsumerStats(metrics.Tally):
    """Counters a consumer keeps (in the metrics registry); nothing is skipped uncounted.
    Counted per polled batch, never per record (a labelled counter costs microseconds)."""

    received = metrics.Count("sf_records_in", "records a consumer received, per topic", "topic")
    handled = metrics.Count("sf_consumer_handled", "decoded records handled")
    screened = metrics.Count("sf_consumer_screened", "records a screen passed over")
    handler_retries = metrics.Count("sf_consumer_handler_retries", "handler calls retried")
    abandoned_batches = metrics.Count(
        "sf_consumer_abandoned_batches", "batches abandoned past the stop grace"
    )
    batches_cut = metrics.Count(
        "sf_consumer_batches_cut", "batches cut short by the runtime's time budget"
    )
    commits_rebalanced = metrics.Count(
        "sf_consumer_commits_rebalanced",
        "commits the group refused because it rebalanced (records are read again)",
    )

    def __init__(self, dead: DeadLetterStats) -> None:
        super().__init__()
        self._dead = dead

    @property
    def dead_lettered(self) -> int:
        """Records this consumer's group sent to the dead-letter topic."""
        return self._dead.dead_lettered

    @property
    def reasons(self) -> dict[str, int]:
        """Dead letters per reason (``decode``, ``handler``...)."""
        return self._dead.reasons


@dataclass(slots=True)
class Polled:
    """One fetched batch: its deliveries, the dead letters of records that did not decode
    (their acks), and the offsets to mark handled once the deliveries are."""

    deliveries: list[Delivery]
    """Decoded at fetch; empty when fetched with ``decode=False`` (see ``undecoded``)."""
    dead: list[asyncio.Future[object]]
    offsets: dict[TopicPartition, int]
    generation: int
    records: int
    """Records fetched (screened and undecodable ones included)."""
    undecoded: list[ConsumerRecord] = field(default_factory=list)
    """Screened records not yet decoded: :meth:`EventConsumer.decoding` decodes them."""
    undecodable: list[tuple[ConsumerRecord, DecodeError]] = field(default_factory=list)
    """Records that failed to decode; :meth:`EventConsumer.finish` dead-letters them."""
    first: dict[TopicPartition, int] = field(default_factory=dict)
    """The offset of each partition's first record in the batch."""


class GroupConsumer:
    """Consumes catalogue topics as a member of a consumer group: :meth:`fetch` a batch,
    handle its deliveries, :meth:`finish` it. The runtime drives it so; :class:`EventConsumer`
    adds a poll loop around a handler. ``gather_s`` > 0 makes a batch gather records for up
    to that long (or until ``max_records``) before it is handed out: fewer, larger writes.
    """

    def __init__(
        self,
        topics: Iterable[str],
        group_id: str,
        *,
        settings: Settings | None = None,
        dlq_producer: EventProducer | None = None,
        from_beginning: bool = True,
        max_records: int = 500,
        commit_interval_ms: int = 1000,
        gather_s: float = 0.0,
        on_assigned: Callable[[set[TopicPartition]], Awaitable[None]] | None = None,
        on_revoked: Callable[[set[TopicPartition]], Awaitable[None]] | None = None,
        screen: Screen | None = None,
        store_offsets: StoreOffsets | None = None,
        **kafka_options: object,
    ) -> None:
        self.settings = settings or get_settings()
        self.topics = [t if "." in t else self.settings.topic(t) for t in topics]
        self.group_id = group_id
        self._max_records = max_records
        self._own_dlq = dlq_producer is None
        self._dlq = dlq_producer or EventProducer(self.settings)
        self.dead_letters = DeadLetters(self._dlq, group_id)
        self.stats = ConsumerStats(self.dead_letters.stats)
        self._stopping = asyncio.Event()
        self._polled = asyncio.Event()
        self._commit_interval = commit_interval_ms / 1000
        self._gather_s = gather_s
        self._last_commit = 0.0
        self._uncommitted: dict[TopicPartition, int] = {}
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._screen = screen
        self._store_offsets = store_offsets
        self._generation = 0
        """Counts revocations: a batch handled across one is not committed."""
        self._ready: set[TopicPartition] = set()
        """Partitions whose ``on_assigned`` callback has finished."""
        self._assign_failed: BaseException | None = None
        """What an ``on_assigned`` callback raised: the consumer stops with it."""
        options: dict[str, object] = {
            "bootstrap_servers": self.settings.kafka_bootstrap,
            "client_id": f"{self.settings.client_id}-{group_id}",
            "group_id": group_id,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest" if from_beginning else "latest",
            "max_partition_fetch_bytes": PARTITION_FETCH_BYTES,
            "fetch_max_wait_ms": FETCH_MAX_WAIT_MS,
            "session_timeout_ms": self.settings.group_session_timeout_ms,
            "heartbeat_interval_ms": min(
                self.settings.group_heartbeat_interval_ms,
                self.settings.group_session_timeout_ms // 3,
            ),
        }
        options.update(kafka_options)
        self._consumer = AIOKafkaConsumer(**options)

    async def start(self) -> None:
        """Connect and join the group."""
        if self._own_dlq:
            await self._dlq.start()
        await self._consumer.start()
        self._consumer.subscribe(self.topics, listener=_CommitOnRevoke(self))

    async def stop(self) -> None:
        """Commit what was handled, leave the group and disconnect (a failed commit is
        logged: its records are read again, and the group is left all the same)."""
        self._stopping.set()
        try:
            await self.commit()
        except KafkaError as exc:
            log.warning(
                "%s: final commit failed (%r); uncommitted records are read again",
                self.group_id,
                exc,
            )
        finally:
            await stop_client(self._consumer, self.group_id)
            if self._own_dlq:
                await self._dlq.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def assignment(self) -> set[TopicPartition]:
        """Partitions this member holds now (empty until the group has been joined)."""
        return set(self._consumer.assignment())

    @property
    def stopping(self) -> bool:
        """Whether a stop was requested."""
        return self._stopping.is_set()

    def request_stop(self) -> None:
        """Ask the poll loop to return (:meth:`EventConsumer.run`: after the batch in hand,
        or without it once it has run ``stop_grace_s`` past the request, uncommitted)."""
        self._stopping.set()

    async def fetch(self, timeout_ms: int = 1000, *, decode: bool = True) -> Polled | None:
        """Fetch one batch (a screen's rejects counted) and decode it, unless ``decode`` is
        False: then :meth:`decoding` decodes each record as it is wanted, so a batch's
        decoded events never all live at once (500 of them spill a core's L2 cache:
        ``bench/bus.py``). None when nothing came. Hand the batch back to :meth:`finish`
        once its deliveries are handled: records that did not decode are dead-lettered
        there."""
        batches = await self._ready_records(await self._fetch(timeout_ms))
        if not batches:
            self._polled.set()
            return None
        undecoded: list[ConsumerRecord] = []
        offsets: dict[TopicPartition, int] = {}
        first: dict[TopicPartition, int] = {}
        screen = self._screen
        screened = records_seen = 0
        for tp, records in batches.items():
            self.stats.count("received", len(records), topic=tp.topic)
            records_seen += len(records)
            if screen is None:
                undecoded.extend(records)
            else:
                for record in records:
                    if screen(record):
                        undecoded.append(record)
                    else:
                        screened += 1
            offsets[tp] = records[-1].offset + 1
            first[tp] = records[0].offset
        if screened:
            self.stats.count("screened", screened)
        polled = Polled([], [], offsets, self._generation, records_seen, undecoded, first=first)
        if decode:
            polled.deliveries = list(self.decoding(polled))
        return polled

    @staticmethod
    def decoding(polled: Polled) -> Iterator[Delivery]:
        """The deliveries of ``polled``'s undecoded records, decoded one at a time, in
        order; a record that does not decode is kept for :meth:`finish` to dead-letter."""
        records, polled.undecoded = polled.undecoded, []
        failed = polled.undecodable
        decode, deliver = codec.decode, Delivery.of
        for record in records:
            try:
                event = decode(record.value, record.headers)
            except DecodeError as exc:
                failed.append((record, exc))
                continue
            yield deliver(record, event)

    async def finish(self, polled: Polled) -> None:
        """The batch's deliveries are handled: dead-letter its undecodable records, wait for
        its dead letters, mark its offsets handled (unless a rebalance revoked its partitions
        meanwhile: their new owner reads them again) and commit if the interval is up."""
        for record, exc in polled.undecodable:
            polled.dead.append(await self._dead_letter(record, f"decode: {exc}"))
        if polled.dead:
            await asyncio.gather(*polled.dead)
        if self._generation == polled.generation:
            if self._store_offsets is not None:
                self._store_offsets(polled.offsets)
            else:
                self._uncommitted.update(polled.offsets)
        assigned = self._consumer.assignment()
        for tp, offset in polled.offsets.items():
            # a rebalance may have revoked it while the batch was handled
            end = self._consumer.highwater(tp) if tp in assigned else None
            if end is not None:
                metrics.set_lag(tp.topic, tp.partition, end - offset)
        self._polled.set()
        await self.commit_if_due()

    async def commit_if_due(self) -> None:
        """Commit handled offsets if the commit interval is up (also after a quiet poll:
        the last batch before a quiet spell is committed too, an idle group shows lag 0)."""
        if self._uncommitted and self._commit_due():
            await self.commit()

    async def _ready_records(
        self, batches: dict[TopicPartition, list[ConsumerRecord]]
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """The fetched records of partitions this member still holds, once ``on_assigned``
        has finished for them: aiokafka starts fetching a new assignment while the callback
        (e.g. a state restore) still runs. Records of revoked partitions are left out,
        uncommitted, for their new owner."""
        while not self._stopping.is_set():
            if self._assign_failed is not None:
                raise AssignmentFailed(
                    f"{self.group_id}: on_assigned failed ({self._assign_failed!r}); its "
                    "partitions' records cannot be handed out without it. Restart the worker "
                    "(a supervisor does): the group reassigns and it runs again"
                ) from self._assign_failed
            assigned = self._consumer.assignment()
            batches = {tp: records for tp, records in batches.items() if tp in assigned}
            if all(tp in self._ready for tp in batches):
                return batches
            await asyncio.sleep(0.01)
        return {}

    async def _fetch(self, timeout_ms: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """One poll; with ``gather_s``, more polls until ``max_records`` records or
        ``gather_s`` seconds after the first one arrived (or a stop request)."""
        batches = await self._consumer.getmany(timeout_ms=timeout_ms, max_records=self._max_records)
        if not batches or self._gather_s <= 0:
            return batches
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._gather_s
        count = sum(len(r) for r in batches.values())
        while count < self._max_records and not self._stopping.is_set():
            left = deadline - loop.time()
            if left <= 0:
                break
            more = await self._consumer.getmany(
                timeout_ms=int(min(left, 0.2) * 1000) + 1, max_records=self._max_records - count
            )
            for tp, records in more.items():
                batches.setdefault(tp, []).extend(records)
                count += len(records)
        return batches

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on (in ``on_assigned``, for offsets kept outside the
        group); an offset the log no longer holds resets as for a new group."""
        self._consumer.seek(tp, offset)

    async def wait_caught_up(self, timeout_s: float) -> bool:
        """Wait until the poll loop (in another task) has handled every record that was
        on the assigned partitions when the group assigned them. False on timeout."""
        ends: dict[TopicPartition, int] | None = None
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    self._polled.clear()
                    assigned = self._consumer.assignment()
                    if assigned and ends is None:
                        ends = await self._consumer.end_offsets(list(assigned))
                    if ends is not None and all(
                        [await self._consumer.position(tp) >= end for tp, end in ends.items()]
                    ):
                        return True
                    await self._polled.wait()
        except TimeoutError:
            return False

    async def lag(self) -> dict[TopicPartition, int | None]:
        """Records behind the log end per assigned partition, as of the last fetch (None
        until a fetch answered for that partition)."""
        lags: dict[TopicPartition, int | None] = {}
        for tp in self._consumer.assignment():
            end = self._consumer.highwater(tp)
            try:
                lags[tp] = None if end is None else max(0, end - await self._consumer.position(tp))
            except IllegalStateError:  # revoked meanwhile (a rebalance)
                continue
        return lags

    def _commit_due(self) -> bool:
        return asyncio.get_running_loop().time() - self._last_commit >= self._commit_interval

    async def commit(self) -> None:
        """Commit the offsets of everything handled so far (also done on an interval).

        A commit the group refuses because it rebalanced (:data:`GROUP_MOVED_ON`) is normal:
        offsets of partitions this member no longer holds are dropped, the others are kept
        for the next commit after the rejoin."""
        self._last_commit = asyncio.get_running_loop().time()
        if not self._uncommitted:
            return
        offsets = dict(self._uncommitted)
        try:
            await self._consumer.commit(offsets)  # kept until it succeeded
        except GROUP_MOVED_ON as exc:
            self._rebalanced(offsets, exc)
            return
        for tp, offset in offsets.items():
            if self._uncommitted.get(tp) == offset:
                del self._uncommitted[tp]

    def _rebalanced(self, offsets: dict[TopicPartition, int], exc: BaseException) -> None:
        """A commit of ``offsets`` failed because the group moved on: keep only the
        partitions still held (committed after the rejoin), drop the rest."""
        held = self._consumer.assignment()
        dropped = {tp: o for tp, o in offsets.items() if tp not in held}
        for tp in dropped:
            if self._uncommitted.get(tp) == offsets[tp]:
                del self._uncommitted[tp]
        self.stats.commits_rebalanced += 1
        log.warning(
            "%s: commit refused, the group rebalanced (%s); %d partition(s) no longer held "
            "are read again by their new owner, %d kept for the next commit",
            self.group_id,
            type(exc).__name__,
            len(dropped),
            len(offsets) - len(dropped),
        )

    async def _dead_letter(self, record: ConsumerRecord, reason: str) -> asyncio.Future[object]:
        return await self.dead_letters.send(
            reason,
            record.topic,
            record.partition,
            record.offset,
            record.key,
            record.value,
            record.headers,
        )

    async def dead_letter(self, d: Delivery, reason: str) -> asyncio.Future[object]:
        """Send a decoded record that could not be processed to the dead-letter topic
        (its original bytes, the reason and its origin in headers); resolves on ack."""
        value = d.value if d.value is not None else codec.encode(d.event).value
        return await self.dead_letters.send(
            reason, d.topic, d.partition, d.offset, d.key, value, d.headers
        )


class EventConsumer(GroupConsumer):
    """A :class:`GroupConsumer` that polls on its own (:meth:`run`) and hands each batch to
    ``handler`` (per event, in partition order) or ``batch_handler`` (once per batch; a sink
    writes the batch durably, then offsets commit): give exactly one."""

    def __init__(
        self,
        topics: Iterable[str],
        group_id: str,
        *,
        handler: Handler | None = None,
        batch_handler: BatchHandler | None = None,
        handler_attempts: int = 3,
        stop_grace_s: float = 3.0,
        **options: Any,
    ) -> None:
        if (handler is None) == (batch_handler is None):
            raise ValueError("give exactly one of handler= or batch_handler=")
        super().__init__(topics, group_id, **options)
        self._handler = handler
        self._batch_handler = batch_handler
        self._attempts = max(1, handler_attempts)
        self._stop_grace_s = stop_grace_s

    async def run(self, *, idle_timeout: float | None = None) -> ConsumerStats:
        """Poll and handle until stopped (or no record arrived for ``idle_timeout`` s)."""
        polling = asyncio.create_task(self._poll_until_stopped(idle_timeout))
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({polling, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not polling.done():  # a stop came while a batch is in hand
                await asyncio.wait({polling}, timeout=self._stop_grace_s)
            if not polling.done():
                polling.cancel()
                self.stats.abandoned_batches += 1
                log.warning(
                    "%s: batch abandoned %gs after the stop request; it is read again",
                    self.group_id,
                    self._stop_grace_s,
                )
                await asyncio.wait({polling})
            else:
                polling.result()
        finally:
            stopping.cancel()
            polling.cancel()
        return self.stats

    async def _poll_until_stopped(self, idle_timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while not self._stopping.is_set():
            count = await self.poll_once(timeout_ms=500)
            now = loop.time()
            if count:
                last = now
            elif idle_timeout is not None and now - last >= idle_timeout:
                break

    async def poll_once(self, timeout_ms: int = 1000) -> int:
        """Fetch one batch, handle it, commit it. Returns the number of records seen."""
        polled = await self.fetch(timeout_ms)
        if polled is None:
            await self.commit_if_due()
            return 0
        with metrics.timed():
            if self._batch_handler is not None:
                if polled.deliveries:
                    await self._batch_handler(polled.deliveries)
                    self.stats.count("handled", len(polled.deliveries))
            elif self._handler is not None:
                handled = 0
                for delivery in polled.deliveries:
                    failure = await self._handle(delivery)
                    if failure is not None:
                        polled.dead.append(failure)
                    else:
                        handled += 1
                if handled:
                    self.stats.count("handled", handled)
        await self.finish(polled)
        return polled.records

    async def _handle(self, delivery: Delivery) -> asyncio.Future[object] | None:
        assert self._handler is not None
        for attempt in range(1, self._attempts + 1):
            try:
                await self._handler(delivery)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if attempt == self._attempts:
                    log.warning("handler failed on %s@%s: %r", delivery.topic, delivery.offset, exc)
                    return await self.dead_letter(delivery, f"handler: {exc!r}")
                self.stats.handler_retries += 1
                await asyncio.sleep(0.05 * attempt)
            else:
                return None
        return None


class AssignmentFailed(RuntimeError):
    """An ``on_assigned`` callback (a state restore, a seek) failed: the consumer stops."""


class _CommitOnRevoke(ConsumerRebalanceListener):
    """Commits handled offsets before partitions move to another group member."""

    def __init__(self, owner: GroupConsumer) -> None:
        self._owner = owner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Commit what was handled of the revoked partitions, then tell the owner. When the
        member was already expelled (its session expired) the commit is refused: those
        records are read again by the new owner, and the owner is told all the same (it
        must let go of their state)."""
        owner = self._owner
        owner._generation += 1
        owner._ready -= set(revoked)
        pending = {tp: o for tp, o in owner._uncommitted.items() if tp in set(revoked)}
        for tp in pending:
            del owner._uncommitted[tp]
        try:
            if pending:
                await owner._consumer.commit(pending)
        except GROUP_MOVED_ON as exc:
            owner._rebalanced(pending, exc)
        except KafkaError as exc:
            log.warning("%s: commit on revoke failed (%r); read again", owner.group_id, exc)
        finally:
            if owner._on_revoked is not None:
                await owner._on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Run the owner's ``on_assigned``, then mark the partitions ready. If it fails,
        the consumer stops with the error (:class:`AssignmentFailed`) instead of waiting
        forever for partitions never marked ready; nothing reaches aiokafka's rebalance
        task, which a stray ``CancelledError`` would end silently (no more heartbeats,
        no rejoin)."""
        try:
            if self._owner._on_assigned is not None:
                await self._owner._on_assigned(set(assigned))
        except Exception as exc:
            self._fail(exc)
            return
        except asyncio.CancelledError as exc:
            if not cancelled_by_someone_else(exc):
                raise
            self._fail(exc)
            return
        self._owner._ready |= set(assigned)

    def _fail(self, exc: BaseException) -> None:
        log.error("%s: on_assigned failed: %r", self._owner.group_id, exc, exc_info=exc)
        self._owner._assign_failed = exc
