"""The control policy: which verdicts stop or pause a running episode (a pure function).

Configured as rules, the first that matches a verdict decides::

    [control]
    rules = [
      {command = "halt", min_severity = "critical"},
      {command = "pause", min_severity = "high", risk_types = ["data_exfiltration"]},
    ]

No rule (the default) means no intervention: the demo's training rounds must see what an
unstopped policy does. Only verdicts on what the agent did count (not those on a menu's
untaken choices), and only those that did not allow; a processor screens replayed verdicts by
their header. A decision's id is derived from the verdict's, so a processor that re-emits
after a restart emits the same decision.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ...schemas import Control, ControlCommand, Severity, Verdict, derive_id

PRODUCER = "control-policy"
PRODUCER_VERSION = 1


class ControlRule(BaseModel):
    """Verdicts at or above ``min_severity`` (of ``risk_types``, when given) get
    ``command``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    command: ControlCommand = Field(description="halt or pause")
    min_severity: Severity = Severity.CRITICAL
    risk_types: list[str] = Field(default_factory=list, description="empty: every risk type")

    def matches(self, verdict: Verdict) -> bool:
        """Whether this rule applies to ``verdict``."""
        return verdict.severity.rank >= self.min_severity.rank and (
            not self.risk_types or verdict.risk_type in self.risk_types
        )


class ControlPolicy(BaseModel):
    """The rules, in order; see the module docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: list[ControlRule] = Field(default_factory=list)

    def decide(self, verdict: Verdict) -> Control | None:
        """The decision ``verdict`` calls for, or None."""
        if verdict.choice is not None or not verdict.decision.acted_on:
            return None  # an uncertain finding never halts an episode
        for index, rule in enumerate(self.rules):
            if rule.matches(verdict):
                where = (
                    "the episode" if verdict.step_index is None else f"step {verdict.step_index}"
                )
                return Control(
                    event_id=derive_id(PRODUCER, PRODUCER_VERSION, verdict.event_id, index),
                    episode_id=verdict.episode_id,
                    command=rule.command,
                    reason=(
                        f"{verdict.severity.value} {verdict.risk_type} at {where} "
                        f"({verdict.checker}): {verdict.reason or 'no reason given'}"
                    )[:1000],
                    source_event_id=verdict.source_event_id,
                    verdict_ids=[verdict.event_id],
                    trace_id=verdict.trace_id,
                )
        return None
