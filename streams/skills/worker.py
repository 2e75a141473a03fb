"""``safactory worker skills``: confirmed unsafe acts joined with their verdicts, paired with
the safe act a sibling took and distilled into deduplicated skills on ``sf.skills``.

``route`` re-keys trajectories (keyed by group) by episode onto ``<group>-by-episode``, so
``join`` reads them co-partitioned with ``sf.verdicts`` (:mod:`.join`, :mod:`.known`)."""

from __future__ import annotations

from ...infra.config import Settings
from ...infra.processor import Processor, Runtime, live_only
from .join import SkillsJoin, SkillsStats
from .known import load_known_skills
from .library import SkillLibrary
from .topics import SkillsTopics


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
        self.settings, self.library = settings, library
        topics = SkillsTopics.of(group_id)
        by_episode = topics.by_episode.name
        self.join = SkillsJoin(library, by_episode, max_waiting=max_waiting, max_done=max_done)
        self.stats: SkillsStats = self.join.stats
        route = Processor(
            "skills",
            inputs=("trajectories",),
            outputs=(by_episode,),
            owns=(topics.by_episode,),
            state=topics.siblings,
            handle=self.join.route,
            group=f"{group_id}-route",
        )
        join = Processor(
            "skills-join",
            inputs=("verdicts", by_episode),
            outputs=("skills",),
            owns=(topics.by_episode,),
            state=topics.join_state,
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
    ``group_id`` is scoped by the topic prefix. Returns the worker (``stats``, ``published``)."""
    worker = SkillsWorker(settings, library, group_id=group_id, max_waiting=max_waiting)
    await worker.serve(idle_timeout=idle_timeout_s)
    return worker
