"""Following ``sf.skills`` into a :class:`SkillLibrary` (what experience injection retrieves).

The topic is compacted (the latest record per skill id wins), so the whole of it is read at
start and then followed live, without a consumer group: a follower commits nothing and every
start rebuilds the library from the log. :meth:`SkillFollower.start` returns once what was on
the topic when it was called is in the library.
"""

from __future__ import annotations

import asyncio

from aiokafka import ConsumerRecord

from ...infra.config import Settings
from ...infra.reader import Decoder, TopicFollower, TopicReader
from ...infra.topics import BY_NAME, create_topics
from ...schemas import Skill
from .library import SkillLibrary


class SkillFollower(TopicFollower):
    """Feeds ``library`` from the skills topic of ``settings`` until stopped."""

    def __init__(self, settings: Settings, library: SkillLibrary) -> None:
        self.settings = settings
        self.library = library
        self.topic = settings.topic(Skill.TOPIC)
        self.read = 0
        """Skill records folded in so far (a re-published skill counts again)."""
        self._reader = TopicReader(settings, "skill-follower", committed_only=False)
        self._decoder = Decoder("skill-follower")

    async def start(self, timeout_s: float = 30.0) -> None:
        """Read the topic to its current end into the library, then follow it."""
        await create_topics(self.settings, [BY_NAME[Skill.TOPIC]])
        spans = await self._open(self.topic, until="end")
        try:
            async with asyncio.timeout(timeout_s):
                async for records in self._reader:
                    await self._fold(records)
            await self._reader.open(spans, start={tp: span.end or 0 for tp, span in spans.items()})
        except BaseException:
            await self._reader.stop()
            raise
        self._follow_in_background(self._follow(), "skill-follower")

    async def _follow(self) -> None:
        while True:
            await self._fold(await self._reader.read(timeout_ms=500))

    async def _fold(self, records: list[ConsumerRecord]) -> None:
        skills = [event for _, event in self._decoder(records) if isinstance(event, Skill)]
        if skills:
            await asyncio.to_thread(self.library.add, skills)
            self.read += len(skills)
