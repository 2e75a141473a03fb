"""The skills already published, read back from the compacted ``sf.skills`` at start, so
deduplication continues across restarts."""

from __future__ import annotations

from ...infra.config import Settings
from ...infra.reader import Decoder, TopicReader
from ...schemas import Skill
from .library import SkillLibrary


async def load_known_skills(settings: Settings, library: SkillLibrary) -> int:
    """Read ``sf.skills`` as it is now (no consumer group) into ``library``; the count."""
    latest: dict[str, Skill] = {}
    async with TopicReader(settings, "skills-known") as reader:
        await reader.open(
            await reader.partitions([settings.topic("skills")], wait_s=30), until="end"
        )
        decoder = Decoder("skills-known")
        async for records in reader:
            for _, skill in decoder(records):
                if isinstance(skill, Skill):
                    latest[skill.skill_id] = skill
    library.add(latest.values())
    return len(latest)
