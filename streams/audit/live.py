"""The live auditor's function and its episode bookkeeping, wired by :mod:`.worker`.

Each step is judged in order with the steps of its episode before it. The context is the
processor's keyed state (key = episode id, item = step event id, value = the compacted
step), so a restarted or rebalanced auditor judges multi-step risks (a sensitive read, then
a send) with the context the previous owner built; a step that falls out of the bounded
context is deleted from it. Verdict ids derive from the step's id, so a step read again
after a crash yields the same ids and sinks deduplicate.

Memory stays bounded: once an episode is complete (its end, on ``sf.episodes``,
co-partitioned with ``sf.steps``, and every step it counts: ``schemas/completion.py``),
whichever came last, its context is forgotten ``ended_grace_s`` later; an episode with no
step for ``context_ttl_s`` of caught-up time is forgotten too, and past
``max_context_bytes`` the least recently active episodes go. A step that waited past
``shed_after_s`` is judged by the fast tier only, and the verdicts of the skipped checkers
say so. Once an episode is complete, the deep tier (checkers of kind ``deep``, if any run)
judges it whole (``AuditProcessor.finish``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from ...infra import metrics
from ...infra.consumer import Delivery
from ...infra.processor import Context, Rejected, Tick
from ...infra.store import PartitionState
from ...schemas import EpisodeEnded, Step
from ...schemas.completion import episode_complete
from .engine import AuditEngine
from .processor import AuditProcessor, decode_step, encode_step

log = logging.getLogger(__name__)

DECODED_CACHE_SIZE = 1_000
"""Episodes whose decoded context is kept between their steps (others decode from bytes)."""


class AuditStats(metrics.Tally):
    """What the audit worker did (a view over the metrics registry)."""

    steps_seen = metrics.Count("sf_audit_steps", "steps audited")
    steps_shed = metrics.Count(
        "sf_stale_skipped", "work skipped because its input was stale, per reason", "reason"
    )
    """Steps judged by the fast tier only: they waited past ``shed_after_s``."""
    evicted = metrics.Count("sf_audit_evicted", "live episodes forgotten to bound memory")


class LiveAudit:
    """The audit processor's function (:meth:`handle`), its timer (:meth:`expire`), its
    rebalance hooks, and which episodes are live, ended or decoded."""

    def __init__(
        self,
        engine: AuditEngine,
        episodes_topic: str,
        *,
        context_limit: int = 32,
        context_ttl_s: float = 3600.0,
        ended_grace_s: float = 30.0,
        max_context_bytes: int = 256 * 1024 * 1024,
        shed_after_s: float | None = 30.0,
    ) -> None:
        self.audit = AuditProcessor(engine, context_limit)
        self.context_ttl_s = context_ttl_s
        self.ended_grace_s = ended_grace_s
        self.max_context_bytes = max_context_bytes
        self.shed_after_s = shed_after_s
        """A step older than this when its turn comes is judged by the fast tier only
        (None: never shed; the worker then falls further behind under overload)."""
        self.stats = AuditStats()
        self._behind_logged = 0.0
        self._live: OrderedDict[str, tuple[float, int, int]] = OrderedDict()
        """Episode → (caught-up clock of its last step, its partition, steps audited),
        least recently active first."""
        self._ends: OrderedDict[str, int] = OrderedDict()
        """Episode → declared step count, for ends read before the episode's last step."""
        self._ended: OrderedDict[str, float] = OrderedDict()
        """Episodes ended and fully audited → clock at which to forget them."""
        self._decoded: OrderedDict[str, list[Step]] = OrderedDict()
        self._clock = 0.0
        """Seconds the worker has spent caught up (advanced by the expiry timer)."""
        self._episodes_topic = episodes_topic

    async def handle(self, record: Delivery, ctx: Context) -> None:
        """Judge one step with its episode's context; emit its verdicts and alerts, keep
        it as context. An episode end only marks its episode finished."""
        event = record.event
        assert ctx.state is not None
        if record.topic == self._episodes_topic:
            if isinstance(event, EpisodeEnded) and self._end(event.episode_id, event.num_steps):
                await self._deep(event.episode_id, ctx)
            return
        if not isinstance(event, Step):
            raise Rejected(f"audit: {type(event).__name__} on the steps topic; expected step/1")
        episode = event.episode_id
        result = await self.audit.process(
            event, self._context(episode, ctx.state), fast_only=self._shed(event)
        )
        for verdict in result.verdicts:
            ctx.emit(verdict)
        for alert in result.alerts:
            ctx.emit(alert)
        state = ctx.state
        for event_id in result.dropped:
            state.delete(episode, event_id)
        kept = result.context[-1] if result.context else None
        if kept is None or kept.event_id != event.event_id:
            kept = next((s for s in result.context if s.event_id == event.event_id), None)
        if kept is not None:
            value = record.value if kept is event and record.value else encode_step(kept)
            state.set(episode, event.event_id, value)
        if self._seen(episode, record.partition, result.context):
            await self._deep(episode, ctx)
        self.stats.count("steps_seen")
        self._bound(ctx)

    async def _deep(self, episode: str, ctx: Context) -> None:
        """The episode ended and its last step was judged: the deep tier judges it whole
        (nothing when no deep checker runs)."""
        assert ctx.state is not None
        verdicts, alerts = await self.audit.finish(self._context(episode, ctx.state))
        for event in (*verdicts, *alerts):
            ctx.emit(event)

    def _shed(self, step: Step) -> str | None:
        """Why the model tier is skipped for ``step`` (it waited too long), or None: under
        overload only rules and heuristics judge, and the skipped checkers' verdicts say
        "not run" with the delay, so the worker catches up and nothing claims a check that
        did not happen."""
        if self.shed_after_s is None:
            return None
        behind = time.time() - step.produced_at
        if behind <= self.shed_after_s:
            return None
        self.stats.count("steps_shed", reason="shed-after")
        now = time.monotonic()
        if now - self._behind_logged >= 10.0:
            self._behind_logged = now
            log.warning(
                "audit worker %.0f s behind (over %.0f s): model checkers skipped "
                "until it catches up; %d steps shed so far",
                behind,
                self.shed_after_s,
                self.stats.steps_shed,
            )
        return f"worker {behind:.0f} s behind, over the {self.shed_after_s:g} s budget"

    # ------------------------------------------------------------------ context

    def _context(self, episode: str, state: PartitionState) -> list[Step]:
        cached = self._decoded.get(episode)
        if cached is not None:
            self._decoded.move_to_end(episode)
            return cached
        stored = state.items(episode)
        if not stored:
            return []
        steps = sorted((decode_step(v) for v in stored.values()), key=lambda s: s.step_index)
        self._remember(episode, steps)
        return steps

    def _remember(self, episode: str, steps: list[Step]) -> None:
        self._decoded[episode] = steps
        self._decoded.move_to_end(episode)
        if len(self._decoded) > DECODED_CACHE_SIZE:
            self._decoded.popitem(last=False)

    def _seen(self, episode: str, partition: int, context: list[Step]) -> bool:
        """Track a judged step; whether its episode is complete with it. Steps audited: the
        span of the context's step indices (sorted; it always keeps the first steps, and an
        episode numbers its steps one after another from its first)."""
        self._remember(episode, context)
        live = self._live.get(episode)
        spanned = context[-1].step_index - context[0].step_index + 1
        seen = spanned if live is None else max(live[2], spanned)
        self._live[episode] = (self._clock, partition, seen)
        self._live.move_to_end(episode)
        if episode_complete(self._ends.get(episode), seen):
            self._finish(episode)
            return True
        return False

    def _end(self, episode: str, num_steps: int) -> bool:
        """An episode ended after ``num_steps`` steps: finished once it is complete
        (already: True, or when its last step comes)."""
        live = self._live.get(episode)
        if live is not None and episode_complete(num_steps, live[2]):
            self._finish(episode)
            return True
        if live is not None or num_steps > 0:
            self._ends[episode] = num_steps
            self._ends.move_to_end(episode)
            if len(self._ends) > DECODED_CACHE_SIZE * 10:  # ends of episodes never seen
                self._ends.popitem(last=False)
        return False

    def _finish(self, episode: str) -> None:
        self._ends.pop(episode, None)
        self._ended[episode] = self._clock + self.ended_grace_s
        self._ended.move_to_end(episode)

    def _bound(self, ctx: Context) -> None:
        """Past ``max_context_bytes`` the least recently active episodes go."""
        store = ctx.store
        while store.nbytes > self.max_context_bytes and len(self._live) > 1:
            self.stats.evicted += 1
            self._forget(next(iter(self._live)), ctx)

    def _forget(self, episode: str, ctx: Context) -> None:
        """Drop an episode from memory and delete its context (tombstones)."""
        live = self._live.pop(episode, None)
        self._decoded.pop(episode, None)
        self._ends.pop(episode, None)
        self._ended.pop(episode, None)
        if live is not None:
            ctx.state_of(live[1]).delete(episode)

    async def expire(self, tick: Tick) -> None:
        """Timer: advance the clock by the caught-up time, forget ended episodes whose
        grace is over and episodes idle past the TTL, on partitions that are caught up."""
        if not tick.behind:
            self._clock += tick.elapsed
        now = self._clock
        due = []
        for episode, at in self._ended.items():  # in grace order: the clock only advances
            if at > now:
                break
            due.append(episode)
        for episode in due:
            live = self._live.get(episode)
            if live is None or live[1] in tick.caught_up:
                self._forget(episode, tick.ctx)
        before = now - self.context_ttl_s
        idle = []
        for episode, (seen, partition, _) in self._live.items():  # least recent first
            if seen >= before:
                break
            if partition in tick.caught_up:
                idle.append(episode)
        for episode in idle:
            self._forget(episode, tick.ctx)

    async def restored(self, partitions: set[int], ctx: Context) -> None:
        """The context of newly assigned partitions was read back: track its episodes."""
        for partition in partitions:
            state = ctx.state_of(partition)
            for episode in state.keys():
                self._decoded.pop(episode, None)
                self._live[episode] = (self._clock, partition, 0)

    async def released(self, partitions: set[int]) -> None:
        """Partitions went to another member: forget their episodes here (not their state)."""
        for episode in [e for e, (_, p, _) in self._live.items() if p in partitions]:
            self._live.pop(episode, None)
            self._decoded.pop(episode, None)
            self._ended.pop(episode, None)
