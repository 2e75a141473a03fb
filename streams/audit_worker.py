"""``safactory worker audit``: the live auditor as a stream processor on ``sf.steps``.

Steps are consumed by a consumer group (one partition's steps judged in order), each
episode's context is kept in memory and written through, one record per context step, to a
compacted context topic (``<prefix>audit-context``, key ``<episode id>\\0<step event id>``,
written to the partition number its step came from, so it is co-partitioned with
``sf.steps``). A step that falls out of the bounded context gets a tombstone. Every verdict
goes to ``sf.verdicts``, the severe ones to ``sf.alerts``. When the group hands this worker a
partition, the worker first reads that partition of the context topic to its end, so a
restarted or rebalanced auditor judges multi-step risks (a sensitive read, then a send) with
the context the previous owner built. Writing one step per record keeps the cost of a step
independent of its episode's length. An episode with no step for ``context_ttl_s`` is
forgotten and tombstoned, so memory and the context topic stay bounded on a worker that runs
for weeks.

Offsets are committed only after a batch's verdicts, alerts and context records were
acknowledged (at-least-once); verdict ids are derived from the step's event id, so a step
redelivered after a crash yields the same ids and sinks deduplicate. Records that do not
decode as a step go to ``sf.dlq`` with the reason. While a large batch is audited the worker
yields to the event loop every few milliseconds, so finished verdicts leave at once.

Why not a faust table: with faust-streaming 0.15.3 a restarted worker intermittently never
fetched one steps partition again after its table recovery (committed offset 2, log end 3,
worker idle), which stalled the audit of every episode on that partition.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections import OrderedDict
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer, TopicPartition

from ..infra import aio
from ..infra.config import Settings, get_settings
from ..infra.consumer import Delivery, EventConsumer
from ..infra.producer import EventProducer
from ..infra.topics import BY_NAME, TopicSpec, create_topics
from ..schemas import Event, Step
from .audit.engine import AuditEngine
from .audit.processor import AuditProcessor, decode_step, encode_step

log = logging.getLogger(__name__)

CONTEXT_TOPIC = TopicSpec(
    "audit-context", "episode id", "the live auditor's per-episode context",
    cleanup="compact", partitions=None,
)  # fmt: skip
DECODED_CACHE_SIZE = 10_000
"""Episodes whose decoded context is kept in memory between their steps."""
YIELD_EVERY_S = 0.005
"""Longest stretch of auditing without letting the producer send what is ready."""
SEP = b"\0"
GROUP = "audit"
"""The auditors' consumer group (scoped by the topic prefix, ``Settings.group``)."""


class NotAStep(ValueError):
    """A decodable event that is not a step arrived on the steps topic."""


def changelog_topic(settings: Settings) -> str:
    """Name of the compacted topic holding each episode's context."""
    return settings.topic(CONTEXT_TOPIC.name)


class AuditWorker:
    """Consumes steps, audits them in order with their episode's context, emits verdicts."""

    def __init__(
        self,
        engine: AuditEngine,
        settings: Settings | None = None,
        *,
        context_limit: int = 32,
        context_ttl_s: float = 3600.0,
    ) -> None:
        self.settings = settings or get_settings()
        self.processor = AuditProcessor(engine, context_limit)
        self.context_ttl_s = context_ttl_s
        self.contexts: dict[bytes, dict[bytes, bytes]] = {}
        """Episode id → {step event id: stored step}: every live episode's context as stored."""
        self._episodes: OrderedDict[bytes, tuple[float, int]] = OrderedDict()
        """Episode id → (loop time of its last step, its partition), least recent first."""
        self._decoded: OrderedDict[bytes, list[Step]] = OrderedDict()
        self.steps_seen = 0
        self.verdicts_sent = 0
        self.alerts_sent = 0
        self._producer: EventProducer | None = None
        self._consumer: EventConsumer | None = None
        self._restored = asyncio.Event()
        """Set while no context restore is running: batches wait for it, since aiokafka may
        hand out records of a new assignment before the assignment callback finished."""

    # ------------------------------------------------------------------ running

    def run(self, loglevel: str = "warning") -> None:
        """Run in the foreground until SIGINT or SIGTERM."""
        logging.basicConfig(
            level=loglevel.upper(), format="[%(asctime)s] %(levelname)s %(message)s"
        )
        aio.run(self.serve(), self.settings)

    async def serve(self) -> None:
        """Create missing topics, join the group and audit until asked to stop."""
        await create_topics(self.settings, [*(BY_NAME[n] for n in
                                              ("steps", "verdicts", "alerts", "dlq")),
                                            CONTEXT_TOPIC])  # fmt: skip
        loop = asyncio.get_running_loop()
        async with EventProducer(self.settings) as producer:
            self._producer = producer
            consumer = EventConsumer(
                ["steps"], self.settings.group(GROUP), batch_handler=self._audit_batch,
                settings=self.settings, dlq_producer=producer, on_assigned=self._restore,
            )  # fmt: skip
            self._consumer = consumer
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, consumer.request_stop)
            async with consumer:
                aio.tune_gc()
                log.warning("audit worker ready: group %s", self.settings.group(GROUP))
                await consumer.run()
        log.warning("audit worker stopped: %d steps, %d verdicts, %d alerts",
                    self.steps_seen, self.verdicts_sent, self.alerts_sent)  # fmt: skip

    # ------------------------------------------------------------------ auditing

    async def _audit_batch(self, deliveries: list[Delivery]) -> None:
        """Audit a polled batch in order; wait until everything it emits is acknowledged."""
        assert self._producer is not None
        await self._restored.wait()
        loop = asyncio.get_running_loop()
        acks: list[asyncio.Future[object]] = []
        since_yield = loop.time()
        for delivery in deliveries:
            if loop.time() - since_yield >= YIELD_EVERY_S:
                await asyncio.sleep(0)  # let linger timers hand finished verdicts over
                since_yield = loop.time()
            step = delivery.event
            if not isinstance(step, Step):
                acks.append(await self._dead_letter(delivery, NotAStep(
                    f"{type(step).__name__} on the steps topic; expected step/1")))  # fmt: skip
                continue
            key = step.episode_id.encode()
            try:
                result = await self.processor.process(step, self._context(key))
            except Exception as exc:  # a bug must not stop the stream: keep the record
                acks.append(await self._dead_letter(delivery, exc))
                continue
            acks += await self._send(result.verdicts)
            acks += await self._send(result.alerts)
            acks += await self._store(key, step, result.context, result.dropped,
                                      delivery.partition)  # fmt: skip
            self.steps_seen += 1
            self.verdicts_sent += len(result.verdicts)
            self.alerts_sent += len(result.alerts)
        acks += await self._expire(loop.time() - self.context_ttl_s)
        if acks:
            await asyncio.gather(*acks)

    async def _expire(self, before: float) -> list[asyncio.Future[object]]:
        """Forget, and tombstone, the context of episodes whose last step came ``before``."""
        assert self._producer is not None
        topic = changelog_topic(self.settings)
        acks = []
        while self._episodes:
            key, (seen, partition) = next(iter(self._episodes.items()))
            if seen >= before:
                break
            del self._episodes[key]
            self._decoded.pop(key, None)
            for event_id in self.contexts.pop(key, {}):
                acks.append(await self._producer.send_raw(
                    topic, key=key + SEP + event_id, value=None, headers=[],
                    partition=partition))  # fmt: skip
        return acks

    async def _store(
        self, key: bytes, step: Step, context: list[Step], dropped: list[str], partition: int
    ) -> list[asyncio.Future[object]]:
        """Write the step into its episode's context (and tombstones for dropped steps)."""
        assert self._producer is not None
        topic = changelog_topic(self.settings)
        stored = self.contexts.setdefault(key, {})
        writes: list[tuple[bytes, bytes | None]] = [
            (event_id.encode(), None) for event_id in dropped
        ]
        kept = next((s for s in reversed(context) if s.event_id == step.event_id), None)
        if kept is not None:
            writes.append((step.event_id.encode(), encode_step(kept)))
        acks = []
        for event_id, value in writes:
            if value is None:
                stored.pop(event_id, None)
            else:
                stored[event_id] = value
            acks.append(await self._producer.send_raw(
                topic, key=key + SEP + event_id, value=value, headers=[],
                partition=partition))  # fmt: skip
        self._remember(key, context)
        self._episodes[key] = (asyncio.get_running_loop().time(), partition)
        self._episodes.move_to_end(key)
        return acks

    async def _send(self, events: Sequence[Event]) -> list[asyncio.Future[object]]:
        assert self._producer is not None
        return [await self._producer.send(e) for e in events]

    async def _dead_letter(self, delivery: Delivery, exc: Exception) -> asyncio.Future[object]:
        assert self._consumer is not None
        return await self._consumer.dead_letter(delivery, f"audit: {exc!r}")

    # ------------------------------------------------------------------ context

    def _context(self, key: bytes) -> list[Step]:
        cached = self._decoded.get(key)
        if cached is not None:
            self._decoded.move_to_end(key)
            return cached
        stored = self.contexts.get(key)
        if not stored:
            return []
        steps = sorted((decode_step(v) for v in stored.values()), key=lambda s: s.step_index)
        self._remember(key, steps)
        return steps

    def _remember(self, key: bytes, steps: list[Step]) -> None:
        self._decoded[key] = steps
        self._decoded.move_to_end(key)
        while len(self._decoded) > DECODED_CACHE_SIZE:
            self._decoded.popitem(last=False)

    async def _restore(self, assigned: set[TopicPartition]) -> None:
        """Read the context of every episode on the newly assigned steps partitions."""
        self._restored.clear()
        try:
            await self._read_contexts({tp.partition for tp in assigned})
        finally:
            self._restored.set()

    async def _read_contexts(self, partitions: set[int]) -> None:
        if not partitions:
            return
        for key in [k for k, (_, p) in self._episodes.items() if p in partitions]:
            del self._episodes[key]  # what another owner held meanwhile is read afresh
            self.contexts.pop(key, None)
            self._decoded.pop(key, None)
        now = asyncio.get_running_loop().time()
        topic = changelog_topic(self.settings)
        reader = AIOKafkaConsumer(bootstrap_servers=self.settings.kafka_bootstrap,
                                  enable_auto_commit=False)  # fmt: skip
        await reader.start()
        try:
            tps = [TopicPartition(topic, p) for p in sorted(partitions)]
            reader.assign(tps)
            await reader.seek_to_beginning(*tps)
            ends = await reader.end_offsets(tps)
            pending = {tp for tp in tps if ends[tp] > 0}
            restored = 0
            while pending:
                batch = await reader.getmany(*pending, timeout_ms=1000)
                for tp, records in batch.items():
                    for record in records:
                        episode, sep, event_id = (record.key or b"").rpartition(SEP)
                        if not sep:
                            continue
                        self._decoded.pop(episode, None)
                        self._episodes[episode] = (now, tp.partition)
                        stored = self.contexts.setdefault(episode, {})
                        if record.value is None:
                            stored.pop(event_id, None)
                        else:
                            stored[event_id] = record.value
                            restored += 1
                    if records and records[-1].offset + 1 >= ends[tp]:
                        pending.discard(tp)
            log.warning("restored context of %d records from %s partitions %s",
                        restored, topic, sorted(partitions))  # fmt: skip
        finally:
            await reader.stop()
