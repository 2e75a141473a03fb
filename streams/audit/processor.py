"""The stream side of the auditor, without Kafka: per-episode context and what to emit.

The worker (``streams/audit/worker.py``, its function in :mod:`.live`) keeps each episode's
context step by step, as bytes produced here, in a compacted context topic, and emits what
:meth:`AuditProcessor.process` returns. Keeping this plain makes redelivery, restarts and
alert rules testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...schemas import Alert, Decision, Step, Verdict, derive_id
from .engine import ENGINE_VERSION, AuditEngine, StepAudit

HEAD_STEPS = 2
"""Earliest steps always kept in context: they carry the user's task."""
MAX_FIELD_CHARS = 4000
"""Longest observation / tool output kept per context step (checkers read the start)."""


def compact(step: Step) -> Step:
    """The step as context needs it: no token ids or logprobs, long texts cut. A step with
    nothing to cut is returned itself (no copy: the worker then stores its wire bytes)."""
    update: dict[str, object] = {}
    for name in ("token_ids", "logprobs", "prompt_token_ids"):
        if getattr(step, name) is not None:
            update[name] = None
    for name in ("observation", "tool_result"):
        value = getattr(step, name)
        if value and len(value) > MAX_FIELD_CHARS:
            update[name] = value[:MAX_FIELD_CHARS]
    return step.model_copy(update=update) if update else step


def encode_step(step: Step) -> bytes:
    """A context step as stored in the context topic (the step's JSON payload)."""
    return step.model_dump_json().encode()


def decode_step(value: bytes) -> Step:
    """A context step from its stored bytes."""
    return Step.model_validate_json(value)


def bounded(steps: list[Step], limit: int) -> list[Step]:
    """Keep the first ``HEAD_STEPS`` steps (the task) and the latest ones, ``limit`` in all."""
    if len(steps) <= limit:
        return steps
    return steps[:HEAD_STEPS] + steps[-(limit - HEAD_STEPS) :]


def alert_of(verdict: Verdict) -> Alert:
    """The alert republishing a verdict (its own deterministic id)."""
    event_id = derive_id("safactory.audit.alert", ENGINE_VERSION, verdict.event_id)
    return Alert(**{**dict(verdict), "event_id": event_id})


@dataclass(slots=True)
class Processed:
    """What one step produced: verdicts, alerts and the episode's new context."""

    audit: StepAudit
    verdicts: list[Verdict]
    alerts: list[Alert]
    context: list[Step]
    dropped: list[str]
    """Event ids of stored steps that fell out of the bounded context."""


class AuditProcessor:
    """Audits steps in arrival order against their episode's stored context."""

    def __init__(self, engine: AuditEngine, context_limit: int = 32) -> None:
        if context_limit <= HEAD_STEPS:
            raise ValueError(f"context_limit must exceed {HEAD_STEPS}")
        self.engine = engine
        self.context_limit = context_limit

    async def process(
        self, step: Step, stored: list[Step], *, fast_only: str | None = None
    ) -> Processed:
        """Audit ``step`` against the steps stored before it (``fast_only``: see
        :meth:`AuditEngine.audit_step`). A redelivered step (same event id) is judged
        against the same earlier steps and yields the same ids."""
        earlier = [
            s for s in stored if s.step_index < step.step_index and s.event_id != step.event_id
        ]
        audit = await self.engine.audit_step(step, earlier, fast_only=fast_only)
        verdicts = audit.all_verdicts
        alert_rank = self.engine.policy.alert_at.rank
        alerts = [
            alert_of(v)
            for v in audit.verdicts
            if v.decision == Decision.BLOCK and v.severity.rank >= alert_rank
        ]
        kept = [s for s in stored if s.event_id != step.event_id]
        updated = sorted([*kept, compact(step)], key=lambda s: s.step_index)
        context = bounded(updated, self.context_limit)
        dropped: list[str] = []
        if context is not updated:  # some fell out
            still = {s.event_id for s in context}
            dropped = [s.event_id for s in kept if s.event_id not in still]
        return Processed(audit, verdicts, alerts, context, dropped)

    async def finish(self, steps: list[Step]) -> tuple[list[Verdict], list[Alert]]:
        """The deep tier's verdicts (and alerts) on an episode that ended: every step
        judged with the steps before it, as a batch audit does. Ids derive from the steps,
        so an episode finished twice (a redelivered end) yields the same verdicts."""
        ordered = sorted(steps, key=lambda s: s.step_index)
        if not any(c.kind == "deep" for c in self.engine.checkers):
            return [], []
        audits = await self.engine.audit_episode(ordered, tier="end")
        verdicts = [v for audit in audits for v in audit.all_verdicts]
        alert_rank = self.engine.policy.alert_at.rank
        alerts = [
            alert_of(v)
            for audit in audits
            for v in audit.verdicts
            if v.decision == Decision.BLOCK and v.severity.rank >= alert_rank
        ]
        return verdicts, alerts
