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

from aiokafka import ConsumerRecord

from ...infra.config import Settings
from ...infra.reader import TopicReader
from ...infra.topics import BY_NAME, create_topics
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
        self._reader = TopicReader(settings, "skill-follower", committed_only=False)
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float = 30.0) -> None:
        """Read the topic to its current end into the library, then follow it."""
        await create_topics(self.settings, [BY_NAME[Skill.TOPIC]])
        await self._reader.start()
        try:
            tps = await self._reader.partitions([self.topic], wait_s=timeout_s)
            spans = await self._reader.open(tps, until="end")
            async with asyncio.timeout(timeout_s):
                async for records in self._reader:
                    await self._fold(records)
            await self._reader.open(tps, start={tp: span.end or 0 for tp, span in spans.items()})
        except BaseException:
            await self._reader.stop()
            raise
        self._task = asyncio.create_task(self._follow(), name="skill-follower")

    async def _follow(self) -> None:
        while True:
            await self._fold(await self._reader.read(timeout_ms=500))

    async def _fold(self, records: list[ConsumerRecord]) -> None:
        skills = []
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
        await self._reader.stop()

    async def __aenter__(self) -> SkillFollower:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
