"""``safactory worker skills``: failed and unsafe trajectories, joined with their verdicts,
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

import asyncio
from collections import OrderedDict

from aiokafka import ConsumerRecord

from ...infra import metrics
from ...infra.config import Settings
from ...infra.consumer import Delivery
from ...infra.processor import Context, Processor, Runtime
from ...infra.reader import TopicReader
from ...infra.store import PartitionState
from ...infra.topics import TopicSpec
from ...schemas import Decision, DecodeError, Skill, Trajectory, Verdict, codec
from ...schemas import headers as h
from .library import SkillLibrary, distil_lessons

TRAJECTORY = "trajectory"
DONE = "done"
"""Items of an episode's state besides its verdicts (keyed by verdict id)."""
ALLOWED = b""
"""Stored for a verdict that allowed: only its id counts (lessons come from the others)."""


class SkillsStats(metrics.Tally):
    """What the skills worker did (in the metrics registry)."""

    trajectories = metrics.Count("sf_skills_trajectories", "trajectories distilled")
    distilled_without_all_verdicts = metrics.Count(
        "sf_skills_without_all_verdicts", "trajectories distilled before all their verdicts came"
    )
    known_at_start = metrics.Level("sf_skills_known_at_start", "skills read back at start")


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


def _not_a_replay(record: ConsumerRecord) -> bool:
    return not any(key == h.REPLAY for key, _ in record.headers or ())


class SkillsWorker:
    """The two processors of the skills worker and the join's bookkeeping."""

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
        self.max_waiting = max_waiting
        self.max_done = max_done
        self.stats = SkillsStats()
        self.by_episode = TopicSpec(
            f"{group_id}-by-episode", "episode id", "trajectories re-keyed for the skills join"
        )
        join_state = TopicSpec(
            f"{group_id}-join",
            "<episode>\\0<verdict id> | <episode>\\0trajectory | <episode>\\0done",
            "the skills worker's verdicts and trajectories waiting for each other",
            cleanup="compact",
        )
        self._wanted: dict[str, frozenset[str]] = {}
        """Episode → the verdict ids its trajectory names (decoded once)."""
        self._open: dict[int, OrderedDict[str, None]] = {}
        self._done: dict[int, OrderedDict[str, None]] = {}
        route = Processor(
            "skills",
            inputs=("trajectories",),
            outputs=(self.by_episode.name,),
            owns=(self.by_episode,),
            handle=self.route,
            group=f"{group_id}-route",
            kafka={"max_partition_fetch_bytes": 16 * 1024 * 1024},
        )
        join = Processor(
            "skills-join",
            inputs=("verdicts", self.by_episode.name),
            outputs=("skills",),
            owns=(self.by_episode,),
            state=join_state,
            handle=self.join,
            screen=_not_a_replay,
            on_assigned=self.restored,
            on_revoked=self.released,
            on_rollback=self.rebuild,
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

    # ------------------------------------------------------------------ route

    async def route(self, record: Delivery, ctx: Context) -> None:
        """Re-key a trajectory by its episode (co-partitioned with its verdicts)."""
        t = record.event
        if not isinstance(t, Trajectory):
            return
        steps = [
            s.model_copy(update={"token_ids": None, "logprobs": None, "prompt_token_ids": None})
            for s in t.steps
        ]
        encoded = codec.encode(t.model_copy(update={"steps": steps}))
        ctx.forward(self.by_episode.name, t.episode_id.encode(), encoded.value, encoded.headers)

    # ------------------------------------------------------------------ join

    async def join(self, record: Delivery, ctx: Context) -> None:
        """Keep a verdict or a trajectory for its episode; distil once both are in."""
        event, state = record.event, ctx.state
        assert state is not None
        if not isinstance(event, Verdict | Trajectory):
            return
        episode = event.episode_id
        if state.get(episode, DONE) is not None:
            return  # late, redelivered or replayed: the episode was distilled
        if isinstance(event, Verdict):
            flagged = event.decision not in (Decision.ALLOW, Decision.CHECKER_ERROR)
            value = record.value if flagged and record.value else ALLOWED
            state.set(episode, event.event_id, value, record.headers if flagged else ())
        else:
            state.set(episode, TRAJECTORY, record.value or b"", record.headers)
        self._touch(record.partition, episode)
        if self._complete(state, episode):
            await self._distil(state, episode, ctx, complete=True)
        await self._bound(ctx, record.partition)

    def _complete(self, state: PartitionState, episode: str) -> bool:
        wanted = self._wanted.get(episode)
        if wanted is None:
            kept = state.entries(episode).get(TRAJECTORY)
            if kept is None:
                return False
            t = codec.decode(*kept)
            assert isinstance(t, Trajectory)
            wanted = self._wanted[episode] = frozenset(t.verdict_ids)
        items = state.items(episode)
        return all(v in items for v in wanted)

    async def _distil(
        self, state: PartitionState, episode: str, ctx: Context, *, complete: bool
    ) -> None:
        items = state.entries(episode)
        t = codec.decode(*items.pop(TRAJECTORY))
        assert isinstance(t, Trajectory)
        verdicts = [codec.decode(v, hs) for v, hs in items.values() if v != ALLOWED]
        lessons = distil_lessons(t, [v for v in verdicts if isinstance(v, Verdict)])
        for skill in await asyncio.to_thread(self.library.add, lessons):
            ctx.emit(skill)
        state.delete(episode)
        state.set(episode, DONE, b"1")
        self._wanted.pop(episode, None)
        self._open.setdefault(state.partition, OrderedDict()).pop(episode, None)
        self._done.setdefault(state.partition, OrderedDict())[episode] = None
        self.stats.trajectories += 1
        if not complete:
            self.stats.distilled_without_all_verdicts += 1

    def _touch(self, partition: int, episode: str) -> None:
        waiting = self._open.setdefault(partition, OrderedDict())
        waiting[episode] = None
        waiting.move_to_end(episode)

    async def _bound(self, ctx: Context, partition: int) -> None:
        """The oldest open and done episodes go past ``max_waiting`` / ``max_done``."""
        state = ctx.state_of(partition)
        waiting = self._open.setdefault(partition, OrderedDict())
        while len(waiting) > self.max_waiting:
            episode, _ = waiting.popitem(last=False)
            if state.get(episode, TRAJECTORY) is not None:
                await self._distil(state, episode, ctx, complete=False)
            else:
                state.delete(episode)  # verdicts of an episode no trajectory came for
                self._wanted.pop(episode, None)
        done = self._done.setdefault(partition, OrderedDict())
        while len(done) > self.max_done:
            episode, _ = done.popitem(last=False)
            state.delete(episode)

    async def restored(self, partitions: set[int], ctx: Context) -> None:
        """Rebuild the open and done lists of newly assigned partitions from their state."""
        for partition in partitions:
            state = ctx.state_of(partition)
            self._open[partition], self._done[partition] = OrderedDict(), OrderedDict()
            for episode in state.keys():
                kind = self._done if state.get(episode, DONE) is not None else self._open
                kind[partition][episode] = None

    async def rebuild(self, partitions: set[int], ctx: Context) -> None:
        """A failed attempt's writes were rolled back: the lists follow the state again."""
        await self.restored(partitions, ctx)

    async def released(self, partitions: set[int]) -> None:
        """Partitions went to another member: forget their lists here."""
        for partition in partitions:
            self._open.pop(partition, None)
            self._done.pop(partition, None)


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
