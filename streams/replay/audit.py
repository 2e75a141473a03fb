"""Re-audit: past steps through a chosen checker set, and what it changes about the alerts.

Steps are read from a window of the steps topic without a consumer group (``window``), each
judged against the steps of its episode read before it (the live auditor's context rule,
never shed: old steps are not late), and the verdicts and alerts are published to the usual
topics with the ``sf-replay`` header and ids derived with the replay id, so the originals
stay untouched and both are queryable. The diff compares the replay's alerts with the
original alerts (those without ``sf-replay``) of the same steps: an alert is a (step, risk
type) pair; newly raised, cleared and kept ones are counted per risk type and per env.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from aiokafka import ConsumerRecord

from ...infra.config import Settings
from ...infra.processor import live_only
from ...infra.producer import EventProducer
from ...infra.reader import Decoder
from ...schemas import Alert, Event, Severity, Step, codec, derive_id, new_id
from ...schemas import headers as h
from ..audit.checkers.models import HeadChecker
from ..audit.engine import AuditEngine
from ..audit.processor import AuditProcessor, bounded, compact
from .window import Position, Span, parse_position, read_window, screen

REPLAY_HEADER = h.REPLAY
PRODUCER = "safactory.replay"
PRODUCER_VERSION = 1
MAX_EPISODES_IN_CONTEXT = 20_000
"""Episodes whose context is kept at once (least recently stepped ones are dropped)."""
MAX_PENDING_ACKS = 20_000
PREWARM_STEPS = 512
"""Steps whose model-checker texts are embedded together in one batched pass (a forward per
step costs far more than its share of a batch, and old steps are all there to batch)."""
E = TypeVar("E", bound=Event)


def new_replay_id() -> str:
    """A fresh replay id, e.g. ``replay-3f2a9c01d4``."""
    return f"replay-{new_id()[:10]}"


def replay_event_id(replay_id: str, original_id: str) -> str:
    """The id of what replay ``replay_id`` emits in place of ``original_id``: never the
    original's, the same on every run of that replay (sinks deduplicate a rerun)."""
    return derive_id(PRODUCER, PRODUCER_VERSION, replay_id, original_id)


def is_replay(record: ConsumerRecord) -> bool:
    """Whether a record was published by a replay."""
    return not live_only(record)


@dataclass(frozen=True, slots=True)
class AlertRecord:
    """One alert as the diff sees it: which step, which risk, how severe, who said so."""

    step_event_id: str
    episode_id: str
    step_index: int | None
    env: str
    risk_type: str
    severity: str
    checker: str

    @property
    def key(self) -> tuple[str, str]:
        """Alerts are compared as (step, risk type)."""
        return (self.step_event_id, self.risk_type)

    @classmethod
    def of(cls, alert: Alert) -> AlertRecord:
        """The record of an alert event."""
        return cls(
            alert.source_event_id,
            alert.episode_id,
            alert.step_index,
            alert.env or "-",
            alert.risk_type,
            alert.severity.value,
            alert.checker,
        )


@dataclass(frozen=True)
class AuditWindow:
    """What a re-audit reads: a window of the steps topic and episode filters."""

    start: Position | None = None
    end: Position | None = None
    episodes: frozenset[str] | None = None
    envs: frozenset[str] | None = None
    with_alert: Severity | None = None
    """Only episodes with an original alert at or above this severity."""

    @classmethod
    def of(
        cls,
        start: str | None,
        end: str | None,
        episodes: Iterable[str] | None = None,
        envs: Iterable[str] | None = None,
        with_alert: Severity | None = None,
    ) -> AuditWindow:
        """The window a command's options ask for (``--from`` / ``--to`` as typed, no
        episodes or envs: all); a bad position is a :class:`PositionError`."""
        return cls(
            None if start is None else parse_position(start, "--from"),
            None if end is None else parse_position(end, "--to"),
            frozenset(episodes) if episodes else None,
            frozenset(envs) if envs else None,
            with_alert,
        )

    def describe(self) -> dict[str, Any]:
        """The window as it goes into the JSON report."""
        return {
            "from": self.start.describe() if self.start else "beginning",
            "to": self.end.describe() if self.end else "end at start",
            "episodes": sorted(self.episodes) if self.episodes is not None else None,
            "envs": sorted(self.envs) if self.envs is not None else None,
            "with_alert": self.with_alert.value if self.with_alert else None,
        }


@dataclass
class AuditDiff:
    """The result of a re-audit: counts, and the alerts raised, cleared and kept."""

    replay_id: str
    checkers: list[str]
    window: dict[str, Any]
    published: bool
    steps: int = 0
    episodes: int = 0
    skipped_records: int = 0
    verdicts: int = 0
    seconds: float = 0.0
    raised: list[AlertRecord] = field(default_factory=list)
    cleared: list[AlertRecord] = field(default_factory=list)
    kept: list[AlertRecord] = field(default_factory=list)

    @property
    def steps_per_s(self) -> float:
        """Re-audit speed over the whole run (reading, judging, publishing)."""
        return self.steps / self.seconds if self.seconds else 0.0

    def by(self, attribute: str) -> dict[str, dict[str, int]]:
        """``{value: {"raised", "cleared", "kept"}}`` grouped by ``risk_type`` or ``env``."""
        out: dict[str, dict[str, int]] = {}
        for name in ("raised", "cleared", "kept"):
            for value, count in Counter(getattr(a, attribute) for a in getattr(self, name)).items():
                out.setdefault(value, {"raised": 0, "cleared": 0, "kept": 0})[name] = count
        return dict(sorted(out.items()))

    def as_json(self) -> dict[str, Any]:
        """The report written by ``--out``."""
        return {
            "replay_id": self.replay_id,
            "checkers": self.checkers,
            "window": self.window,
            "published": self.published,
            "steps": self.steps,
            "episodes": self.episodes,
            "skipped_records": self.skipped_records,
            "verdicts": self.verdicts,
            "seconds": round(self.seconds, 3),
            "steps_per_s": round(self.steps_per_s, 1),
            "alerts": {
                "before": len(self.cleared) + len(self.kept),
                "after": len(self.raised) + len(self.kept),
                "raised": len(self.raised),
                "cleared": len(self.cleared),
                "kept": len(self.kept),
            },
            "by_risk_type": self.by("risk_type"),
            "by_env": self.by("env"),
            "raised": [asdict(a) for a in self.raised],
            "cleared": [asdict(a) for a in self.cleared],
        }


@dataclass
class Progress:
    """Callbacks a caller may give to show progress (a rich bar)."""

    total: Callable[[int], None] = lambda n: None
    advance: Callable[[int], None] = lambda n: None


async def alerted_episodes(settings: Settings, at_least: Severity) -> set[str]:
    """Episodes with an original alert (not a replay's) at or above ``at_least``."""
    found: set[str] = set()
    decoder = Decoder("replay")
    async for batch in read_window(settings, settings.topic("alerts")):
        for _, alert in decoder(r for r in batch if not is_replay(r)):
            if isinstance(alert, Alert) and alert.severity.rank >= at_least.rank:
                found.add(alert.episode_id)
    return found


async def original_alerts(
    settings: Settings, step_ids: set[str], since_ms: int | None
) -> list[AlertRecord]:
    """Original alerts (no ``sf-replay`` header) on ``step_ids``, read from ``since_ms``
    (the first replayed step's time: its alerts came after it) to the end of the topic."""
    start = Position(time_ms=since_ms) if since_ms is not None else None
    found: dict[tuple[str, str], AlertRecord] = {}
    decoder = Decoder("replay")
    async for batch in read_window(settings, settings.topic("alerts"), start):
        for _, alert in decoder(r for r in batch if not is_replay(r)):
            if isinstance(alert, Alert) and alert.source_event_id in step_ids:
                record = AlertRecord.of(alert)
                found.setdefault(record.key, record)
    return list(found.values())


async def reaudit(
    settings: Settings,
    engine: AuditEngine,
    window: AuditWindow,
    *,
    replay_id: str | None = None,
    context_limit: int = 32,
    publish: bool = True,
    progress: Progress | None = None,
) -> AuditDiff:
    """Re-audit ``window`` with ``engine`` (:class:`ReAuditor`), publishing the verdicts and
    alerts unless ``publish`` is False (a dry run), and diff the alerts."""
    if not publish:
        auditor = ReAuditor(settings, engine, replay_id=replay_id, context_limit=context_limit)
        return await auditor.run(window, progress)
    async with EventProducer(settings) as producer:
        auditor = ReAuditor(
            settings, engine, replay_id=replay_id, producer=producer, context_limit=context_limit
        )
        return await auditor.run(window, progress)


class ReAuditor:
    """Judges a window of past steps with one engine; see the module docstring."""

    def __init__(
        self,
        settings: Settings,
        engine: AuditEngine,
        *,
        replay_id: str | None = None,
        producer: EventProducer | None = None,
        context_limit: int = 32,
    ) -> None:
        self.settings = settings
        self.engine = engine
        self.replay_id = replay_id or new_replay_id()
        self.producer = producer
        """Where the verdicts and alerts go; None: a dry run that publishes nothing."""
        self.processor = AuditProcessor(engine, context_limit)
        self._contexts: OrderedDict[str, list[Step]] = OrderedDict()
        self._acks: list[asyncio.Future[Any]] = []

    async def run(self, window: AuditWindow, progress: Progress | None = None) -> AuditDiff:
        """Re-audit the window, publish (unless a dry run), and diff the alerts."""
        progress = progress or Progress()
        started = time.perf_counter()
        diff = AuditDiff(
            self.replay_id,
            [c.name for c in self.engine.checkers],
            window.describe(),
            self.producer is not None,
        )
        episodes = window.episodes
        if window.with_alert is not None:
            alerted = await alerted_episodes(self.settings, window.with_alert)
            episodes = alerted if episodes is None else episodes & alerted
        keep = screen(episodes, window.envs)
        new_alerts: dict[tuple[str, str], AlertRecord] = {}
        step_ids: set[str] = set()
        seen_episodes: set[str] = set()
        first_ms: int | None = None
        decoder = Decoder("replay")

        def total(spans: dict[Any, Span]) -> None:
            progress.total(sum(s.size for s in spans.values()))

        async for batch in read_window(
            self.settings, self.settings.topic("steps"), window.start, window.end, on_spans=total
        ):
            steps: list[Step] = []
            for record, step in decoder(r for r in batch if not is_replay(r) and keep(r)):
                if not isinstance(step, Step):
                    diff.skipped_records += 1
                    continue
                first_ms = record.timestamp if first_ms is None else min(first_ms, record.timestamp)
                steps.append(step)
            for start in range(0, len(steps), PREWARM_STEPS):
                chunk = steps[start : start + PREWARM_STEPS]
                self._prewarm(chunk)
                for step in chunk:
                    for alert in await self._judge(step, diff):
                        new_alerts.setdefault(alert.key, alert)
                    step_ids.add(step.event_id)
                    seen_episodes.add(step.episode_id)
            progress.advance(len(batch))
        diff.skipped_records += decoder.undecodable
        await self._settle(0)
        diff.steps, diff.episodes = len(step_ids), len(seen_episodes)
        before = {a.key: a for a in await original_alerts(self.settings, step_ids, first_ms)}
        diff.raised = [a for k, a in new_alerts.items() if k not in before]
        diff.cleared = [a for k, a in before.items() if k not in new_alerts]
        diff.kept = [a for k, a in new_alerts.items() if k in before]
        diff.seconds = time.perf_counter() - started
        return diff

    def _prewarm(self, steps: list[Step]) -> None:
        """Embed, in one batched pass per embedder, every text the model checkers will read
        in ``steps`` (each with the context it will have: the processor's rule); the checks
        then find their vectors cached. A text missed here is embedded when its check runs."""
        heads = [c for c in self.engine.checkers if isinstance(c, HeadChecker)]
        if not heads:
            return
        contexts: dict[str, list[Step]] = {}
        pending: dict[int, tuple[Any, list[str]]] = {}
        for step in steps:
            stored = contexts.get(step.episode_id, self._contexts.get(step.episode_id, []))
            earlier = [
                s for s in stored if s.step_index < step.step_index and s.event_id != step.event_id
            ]
            for head in heads:
                try:
                    texts = head.texts(step, earlier)
                except Exception:  # the check itself reports it
                    continue
                pending.setdefault(id(head.embedder), (head.embedder, []))[1].extend(texts)
            kept = [s for s in stored if s.event_id != step.event_id]
            ordered = sorted([*kept, compact(step)], key=lambda s: s.step_index)
            contexts[step.episode_id] = bounded(ordered, self.processor.context_limit)
        for embedder, texts in pending.values():
            embedder.embed(list(dict.fromkeys(texts)))

    async def _judge(self, step: Step, diff: AuditDiff) -> list[AlertRecord]:
        """Audit one step with its episode's context; publish its verdicts and alerts."""
        context = self._contexts.pop(step.episode_id, [])
        result = await self.processor.process(step, context)
        self._contexts[step.episode_id] = result.context
        if len(self._contexts) > MAX_EPISODES_IN_CONTEXT:
            self._contexts.popitem(last=False)
        verdicts = [self._renamed(v) for v in result.verdicts]
        alerts = [self._renamed(a) for a in result.alerts]
        diff.verdicts += len(verdicts)
        if self.producer is not None:
            for event in (*verdicts, *alerts):
                encoded = codec.encode(event)
                headers = [*encoded.headers, (REPLAY_HEADER, self.replay_id.encode())]
                self._acks.append(
                    await self.producer.send_raw(
                        self.producer.topic_of(event),
                        key=encoded.key,
                        value=encoded.value,
                        headers=headers,
                    )
                )
            await self._settle(MAX_PENDING_ACKS)
        return [AlertRecord.of(a) for a in alerts]  # type: ignore[arg-type]

    def _renamed(self, event: E) -> E:
        return event.model_copy(
            update={"event_id": replay_event_id(self.replay_id, event.event_id)}
        )

    async def _settle(self, allowed: int) -> None:
        """Wait for acknowledgements once more than ``allowed`` are outstanding."""
        if len(self._acks) > allowed:
            acks, self._acks = self._acks, []
            await asyncio.gather(*acks)
