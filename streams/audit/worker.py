"""``safactory worker audit``: the live auditor, ``sf.steps`` (and ``sf.episodes``) in,
``sf.verdicts`` and ``sf.alerts`` out, each episode's context as keyed state.

The function, the expiry timer and the episode bookkeeping are :class:`~.live.LiveAudit`;
the context is the changelog ``audit-context`` (key = episode id, item = step event id), so
a restarted or rebalanced auditor judges with the context the previous owner built.
"""

from __future__ import annotations

from ...infra.config import Settings, get_settings
from ...infra.processor import Processor, Runtime, Timer
from ...infra.topics import TopicSpec
from .engine import AuditEngine
from .live import AuditStats, LiveAudit

CONTEXT_TOPIC = TopicSpec(
    "audit-context",
    "<episode id>\\0<step event id>",
    "the live auditor's per-episode context",
    cleanup="compact",
    partitions=None,
)
GROUP = "audit"
"""The auditors' consumer group (scoped by the topic prefix, ``Settings.group``)."""


def changelog_topic(settings: Settings) -> str:
    """Name of the compacted topic holding each episode's context."""
    return settings.topic(CONTEXT_TOPIC.name)


class AuditWorker:
    """The audit processor: :class:`~.live.LiveAudit` on the runtime."""

    def __init__(
        self,
        engine: AuditEngine,
        settings: Settings | None = None,
        *,
        context_limit: int = 32,
        context_ttl_s: float = 3600.0,
        ended_grace_s: float = 30.0,
        max_context_bytes: int = 256 * 1024 * 1024,
        shed_after_s: float | None = 30.0,
    ) -> None:
        self.settings = settings or get_settings()
        self.live = LiveAudit(
            engine,
            self.settings.topic("episodes"),
            context_limit=context_limit,
            context_ttl_s=context_ttl_s,
            ended_grace_s=ended_grace_s,
            max_context_bytes=max_context_bytes,
            shed_after_s=shed_after_s,
        )
        self.stats: AuditStats = self.live.stats
        """Steps audited, steps judged by the fast tier only (shed), episodes evicted."""
        self.processor = Processor(
            "audit",
            inputs=("steps", "episodes"),
            outputs=("verdicts", "alerts"),
            state=CONTEXT_TOPIC,
            handle=self.live.handle,
            timers=(Timer(1.0, self.live.expire),),
            on_assigned=self.live.restored,
            on_revoked=self.live.released,
            group=GROUP,
            warm=engine.warm,
        )
        self.runtime = Runtime(self.settings, self.processor)

    def run(self, loglevel: str = "warning") -> None:
        """Run in the foreground until SIGINT or SIGTERM."""
        self.runtime.run(loglevel)

    async def serve(self) -> None:
        """Join the group and audit until asked to stop."""
        await self.runtime.serve()
