"""Following ``sf.skills`` into a :class:`SkillLibrary` (what experience injection retrieves).

The topic is compacted (the latest record per skill id wins), so the whole of it is read at
start and then followed live, without a consumer group: a follower commits nothing and every
start rebuilds the library from the log. :meth:`SkillFollower.start` returns once what was on
the topic when it was called is in the library.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import AIOKafkaConsumer, TopicPartition

from ...infra.config import Settings
from ...infra.topics import BY_NAME, create_topics, describe_topics
from ...schemas import DecodeError, Skill, codec
from .library import SkillLibrary

log = logging.getLogger(__name__)


class SkillFollower:
    """Feeds ``library`` from the skills topic of ``settings`` until stopped."""

    def __init__(self, settings: Settings, library: SkillLibrary) -> None:
        self.settings = settings
        self.library = library
        self.topic = settings.topic(Skill.TOPIC)
        self.read = 0
        """Skill records folded in so far (a re-published skill counts again)."""
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float = 30.0) -> None:
        """Read the topic to its current end into the library, then follow it."""
        await create_topics(self.settings, [BY_NAME[Skill.TOPIC]])
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap,
            client_id=f"{self.settings.client_id}-skill-follower",
            group_id=None,
            enable_auto_commit=False,
        )
        rows = {row["topic"]: row for row in await describe_topics(self.settings)}
        count = int(rows[self.topic]["partitions"])  # type: ignore[call-overload]
        await consumer.start()
        self._consumer = consumer
        tps = [TopicPartition(self.topic, p) for p in range(count)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        async with asyncio.timeout(timeout_s):
            while any([await consumer.position(tp) < end for tp, end in ends.items()]):
                await self._fold(await consumer.getmany(timeout_ms=200))
        self._task = asyncio.create_task(self._follow(), name="skill-follower")

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            await self._fold(await self._consumer.getmany(timeout_ms=500))

    async def _fold(self, batches: dict[TopicPartition, list]) -> None:
        skills = []
        for records in batches.values():
            for record in records:
                if record.value is None:
                    continue  # a tombstone: skills are never retracted by the distiller
                try:
                    event = codec.decode(record.value, record.headers)
                except DecodeError as exc:
                    log.warning("skill follower: undecodable record on %s: %s", self.topic, exc)
                    continue
                if isinstance(event, Skill):
                    skills.append(event)
        if skills:
            await asyncio.to_thread(self.library.add, skills)
            self.read += len(skills)

    async def stop(self) -> None:
        """Stop following and disconnect."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()

    async def __aenter__(self) -> SkillFollower:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
