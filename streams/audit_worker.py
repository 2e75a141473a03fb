"""``safactory worker audit``: the live auditor as a faust-streaming processor.

Consumes ``sf.steps`` (agent concurrency 1, so one partition's steps are judged in order),
keeps each episode's context in a changelog-backed table (a restarted worker rebuilds it
from the changelog), and emits every verdict to ``sf.verdicts`` and the severe ones to
``sf.alerts``. Verdict ids are derived from the step's event id, so a step redelivered
after a crash yields the same ids and sinks deduplicate. Records that do not decode as a
step go to ``sf.dlq`` with the reason. Faust flushes the producer before it commits
offsets: delivery is at-least-once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import faust
from faust.types import Message

from ..infra.config import Settings, get_settings
from ..schemas import DeadLetter, DecodeError, Event, Step, codec
from .app import make_app
from .audit.engine import AuditEngine
from .audit.processor import AuditProcessor, decode_context, encode_context

TABLE_NAME = "audit-episode-context"
DECODED_CACHE_SIZE = 10_000
"""Episodes whose decoded context is kept in memory between their steps."""


def app_name(settings: Settings) -> str:
    """The faust app (and consumer group, and changelog) name: one per topic prefix, so
    deployments sharing a cluster under different prefixes never share state."""
    prefix = settings.topic_prefix.strip(".")
    return "audit" if prefix == "sf" else f"audit-{prefix}"


def changelog_topic(settings: Settings) -> str:
    """Name of the changelog topic behind the episode-context table."""
    return f"{settings.client_id}-{app_name(settings)}-{TABLE_NAME}-changelog"


class AuditWorker:
    """Builds the faust app for the auditor; ``app.main()`` or ``worker.run()`` runs it."""

    def __init__(
        self,
        engine: AuditEngine,
        settings: Settings | None = None,
        *,
        context_limit: int = 32,
    ) -> None:
        self.settings = settings or get_settings()
        self.processor = AuditProcessor(engine, context_limit)
        name = app_name(self.settings)
        datadir = self.settings.home / "faust" / name
        datadir.parent.mkdir(parents=True, exist_ok=True)
        self.app = make_app(name, self.settings, datadir=str(datadir))
        self.steps_topic = self.app.topic(self.settings.topic("steps"))
        self.verdicts_topic = self.app.topic(self.settings.topic("verdicts"))
        self.alerts_topic = self.app.topic(self.settings.topic("alerts"))
        self.dlq_topic = self.app.topic(self.settings.topic("dlq"))
        self.table = self.app.Table(
            TABLE_NAME,
            partitions=self.settings.default_partitions,
            key_type=bytes,
            value_type=bytes,
        )
        self.steps_seen = 0
        self.verdicts_sent = 0
        self.alerts_sent = 0
        self.dead_lettered = 0
        self._decoded: OrderedDict[bytes, tuple[bytes, list[Step]]] = OrderedDict()
        self.app.agent(self.steps_topic, name="audit-steps", concurrency=1)(self._consume)

    async def _consume(self, stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            headers = list(message.headers or [])
            try:
                step = codec.decode(event.value, headers)
                if not isinstance(step, Step):
                    raise DecodeError(f"{type(step).__name__} on the steps topic; expected step/1")
            except DecodeError as exc:
                await self._dead_letter(message, event.value, headers, f"decode: {exc}")
                continue
            key = step.episode_id.encode()
            try:
                stored = self._context(key)
                result = await self.processor.process(step, stored)
            except Exception as exc:  # a bug must not stop the stream: keep the record
                await self._dead_letter(message, event.value, headers, f"audit: {exc!r}")
                continue
            await self._emit(self.verdicts_topic, result.verdicts)
            await self._emit(self.alerts_topic, result.alerts)
            value = encode_context(result.context)
            self.table[key] = value
            self._remember(key, value, result.context)
            self.steps_seen += 1
            self.verdicts_sent += len(result.verdicts)
            self.alerts_sent += len(result.alerts)

    def _context(self, key: bytes) -> list[Step]:
        """The episode's stored context; decoded once per table value (the table, rebuilt
        from its changelog after a restart, stays the source of truth)."""
        value = self.table.get(key)
        cached = self._decoded.get(key)
        if cached is not None and cached[0] is value:
            self._decoded.move_to_end(key)
            return cached[1]
        steps = decode_context(value)
        if value is not None:
            self._remember(key, value, steps)
        return steps

    def _remember(self, key: bytes, value: bytes, steps: list[Step]) -> None:
        self._decoded[key] = (value, steps)
        self._decoded.move_to_end(key)
        while len(self._decoded) > DECODED_CACHE_SIZE:
            self._decoded.popitem(last=False)

    async def _dead_letter(
        self, message: Message, value: bytes | None, headers: list[tuple[str, bytes]], reason: str
    ) -> None:
        await self.dlq_topic.send(
            key=message.key,
            value=value,
            headers=DeadLetter.wire_headers(
                headers, reason, message.topic, message.partition, message.offset
            ),
        )
        self.dead_lettered += 1

    async def _emit(self, topic: faust.TopicT, events: Sequence[Event]) -> None:
        for event in events:
            record = codec.encode(event)
            await topic.send(key=record.key, value=record.value, headers=record.headers)

    def run(self) -> None:
        """Run the worker in the foreground until interrupted."""
        from faust.worker import Worker

        Worker(self.app, loglevel="WARNING").execute_from_commandline()
