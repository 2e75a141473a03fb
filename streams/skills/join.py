"""The skills join as plain logic: what the skills worker does with each record it reads.

``route`` reads trajectories keyed by group: it keeps, per group, the acts of the episodes
that came out safe and done (keyed state, at most :data:`MAX_SIBLINGS` per group), and
forwards each trajectory by episode with its safe siblings' acts in the ``sf-siblings``
header, so a lesson can name the safe act that replaces the unsafe one. A trajectory names
the verdicts it was assembled with; it is distilled once every one of them has been read,
in whichever order they come. The state of one episode (its verdicts, its
trajectory, or ``done`` once distilled) is keyed state of the processor (``infra/store.py``);
which episodes are open or done is remembered here per partition, in the order the log
brought them, so what is forgotten past ``max_waiting`` / ``max_done`` is decided by the log.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict

from ...infra import metrics
from ...infra.consumer import Delivery
from ...infra.processor import Context
from ...infra.store import PartitionState
from ...schemas import Trajectory, Verdict, codec
from .library import SkillLibrary, distil_lessons, safe_acts

TRAJECTORY = "trajectory"
DONE = "done"
"""Items of an episode's state besides its verdicts (keyed by verdict id)."""
ALLOWED = b""
"""Stored for a verdict that allowed: only its id counts (lessons come from the others)."""
SIBLINGS = "sf-siblings"
"""Header of a routed trajectory: JSON list of its safe siblings' acts (step → act)."""
MAX_SIBLINGS = 4
"""Safe episodes whose acts a group keeps (the newest)."""


class SkillsStats(metrics.Tally):
    """What the skills worker did (in the metrics registry)."""

    trajectories = metrics.Count("sf_skills_trajectories", "trajectories distilled")
    distilled_without_all_verdicts = metrics.Count(
        "sf_skills_without_all_verdicts", "trajectories distilled before all their verdicts came"
    )
    known_at_start = metrics.Level("sf_skills_known_at_start", "skills read back at start")


class SkillsJoin:
    """The route and join functions of the skills worker, and the join's bookkeeping."""

    def __init__(
        self,
        library: SkillLibrary,
        by_episode: str,
        *,
        max_waiting: int = 10_000,
        max_done: int = 100_000,
    ) -> None:
        self.library = library
        self.by_episode = by_episode
        """The topic (catalogue-style name) trajectories are re-keyed onto."""
        self.max_waiting = max_waiting
        self.max_done = max_done
        self.stats = SkillsStats()
        self._wanted: dict[str, frozenset[str]] = {}
        """Episode → the verdict ids its trajectory names (decoded once)."""
        self._open: dict[int, OrderedDict[str, None]] = {}
        self._done: dict[int, OrderedDict[str, None]] = {}

    # ------------------------------------------------------------------ route

    async def route(self, record: Delivery, ctx: Context) -> None:
        """Keep a safe episode's acts for its group; re-key the trajectory by its episode
        (co-partitioned with its verdicts) with the group's safe acts known so far."""
        t, state = record.event, ctx.state
        if not isinstance(t, Trajectory):
            return
        assert state is not None
        group = t.group_id
        acts = safe_acts(t)
        if acts is not None:
            state.set(group, t.episode_id, json.dumps(acts).encode())
            kept = list(state.items(group))
            for old in kept[: max(0, len(kept) - MAX_SIBLINGS)]:
                state.delete(group, old)
        siblings = [json.loads(v) for e, v in state.items(group).items() if e != t.episode_id]
        steps = [
            s.model_copy(update={"token_ids": None, "logprobs": None, "prompt_token_ids": None})
            for s in t.steps
        ]
        encoded = codec.encode(t.model_copy(update={"steps": steps}))
        headers = [*encoded.headers, (SIBLINGS, json.dumps(siblings).encode())]
        ctx.forward(self.by_episode, t.episode_id.encode(), encoded.value, headers)

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
            flagged = event.decision.acted_on
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
        value, headers = items.pop(TRAJECTORY)
        t = codec.decode(value, headers)
        assert isinstance(t, Trajectory)
        verdicts = [codec.decode(v, hs) for v, hs in items.values() if v != ALLOWED]
        siblings = next((json.loads(v) for k, v in headers if k == SIBLINGS), [])
        siblings = [{int(step): act for step, act in acts.items()} for acts in siblings]
        lessons = distil_lessons(t, [v for v in verdicts if isinstance(v, Verdict)], siblings)
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
