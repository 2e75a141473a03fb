"""``safactory worker skills``: confirmed unsafe acts (the environment's ground truth, blocks
with evidence), joined with their verdicts and paired with the safe act a sibling took,
distilled into deduplicated skills on ``sf.skills``.

A trajectory names the verdicts it was assembled with (``verdict_ids``); it is distilled once
every one of them has been read, whichever comes first. Trajectories are keyed by group id
and verdicts by episode id, so the join is co-partitioned first: ``route`` re-keys each
trajectory by its episode (token ids dropped) onto ``<group>-by-episode``, partitioned like
``sf.verdicts``; ``join`` reads both and keeps, per episode, the verdicts and the trajectory
read so far as keyed state, so a restart loses nothing that was committed. When an episode
is distilled its state is replaced by a ``done`` item, and late or replayed copies of its
records are passed over. What is forgotten is decided from the log, never the clock: a
partition holds at most ``max_waiting`` open episodes and ``max_done`` done ones; past that
the oldest go first (an open one whose trajectory is in is distilled with the verdicts it
has, and counted). Known skills are read back from the compacted ``sf.skills`` at start, so
deduplication continues across restarts.
"""

from __future__ import annotations

from ...infra.config import Settings
from ...infra.processor import Processor, Runtime, live_only
from ...infra.reader import TopicReader
from ...infra.topics import TopicSpec
from ...schemas import DecodeError, Skill, codec
from .join import SkillsJoin, SkillsStats
from .library import SkillLibrary


async def load_known_skills(settings: Settings, library: SkillLibrary) -> int:
    """Read ``sf.skills`` as it is now (no consumer group) into ``library``; the count."""
    latest: dict[str, Skill] = {}
    async with TopicReader(settings, "skills-known") as reader:
        await reader.open(
            await reader.partitions([settings.topic("skills")], wait_s=30), until="end"
        )
        async for records in reader:
            for record in records:
                try:
                    skill = codec.decode(record.value, record.headers)
                except DecodeError:
                    continue
                if isinstance(skill, Skill):
                    latest[skill.skill_id] = skill
    library.add(latest.values())
    return len(latest)


class SkillsWorker:
    """The skills worker: two processors on one runtime (``route``, ``join``)."""

    def __init__(
        self,
        settings: Settings,
        library: SkillLibrary,
        *,
        group_id: str = "safactory-skills",
        max_waiting: int = 10_000,
        max_done: int = 100_000,
    ) -> None:
        self.settings = settings
        self.library = library
        by_episode = TopicSpec(
            f"{group_id}-by-episode", "episode id", "trajectories re-keyed for the skills join"
        )
        join_state = TopicSpec(
            f"{group_id}-join",
            "<episode>\\0<verdict id> | <episode>\\0trajectory | <episode>\\0done",
            "the skills worker's verdicts and trajectories waiting for each other",
            cleanup="compact",
        )
        self.join = SkillsJoin(library, by_episode.name, max_waiting=max_waiting, max_done=max_done)
        self.stats: SkillsStats = self.join.stats
        siblings = TopicSpec(
            f"{group_id}-siblings",
            "<group>\\0<episode id>",
            "the acts of each group's safe episodes, for its unsafe episodes' lessons",
            cleanup="compact",
        )
        route = Processor(
            "skills",
            inputs=("trajectories",),
            outputs=(by_episode.name,),
            owns=(by_episode,),
            state=siblings,
            handle=self.join.route,
            group=f"{group_id}-route",
        )
        join = Processor(
            "skills-join",
            inputs=("verdicts", by_episode.name),
            outputs=("skills",),
            owns=(by_episode,),
            state=join_state,
            handle=self.join.join,
            screen=live_only,
            on_assigned=self.join.restored,
            on_revoked=self.join.released,
            on_rollback=self.join.rebuild,
            group=group_id,
        )
        self.runtime = Runtime(settings, route, join, worker="skills")

    @property
    def published(self) -> int:
        """Skills published (new ones, and known ones grown by a source)."""
        return self.runtime.stats("skills-join").out

    async def serve(self, *, idle_timeout: float | None = None) -> SkillsStats:
        """Read the known skills, then distil until stopped (or idle)."""
        self.stats.known_at_start = await load_known_skills(self.settings, self.library)
        await self.runtime.serve(idle_timeout=idle_timeout)
        return self.stats


async def run_skills(
    settings: Settings,
    library: SkillLibrary,
    *,
    group_id: str = "safactory-skills",
    max_waiting: int = 10_000,
    idle_timeout_s: float | None = None,
) -> SkillsWorker:
    """Distil and publish skills until SIGINT / SIGTERM (or idle for ``idle_timeout_s``);
    ``group_id`` is scoped by the topic prefix (``Settings.group``). Returns the worker
    (its ``stats`` and ``published``)."""
    worker = SkillsWorker(settings, library, group_id=group_id, max_waiting=max_waiting)
    await worker.serve(idle_timeout=idle_timeout_s)
    return worker
