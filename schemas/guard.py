"""The guard contract: what a guard is asked about (a proposed action) and what it answers.

The episode runner (``agents/``) asks a guard before an action executes; guards live in
other components (the auditor's engine in ``streams/audit``) or in ``agents/`` itself (the
regex guard), and the command line wires one in. Both sides share these two types, so
they sit with the rest of the contract here rather than in either component. Decision
names follow OpenTelemetry GenAI where it fits: the operation is ``apply_guardrail``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .chat import ChatMessage
from .events import Action, Alert, Decision, Verdict


@dataclass(frozen=True)
class ProposedAction:
    """What a guard sees: the action and its context (the conversation so far)."""

    episode_id: str
    env: str
    task_id: str
    step_index: int
    action: Action
    messages: list[ChatMessage]


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """``allow`` / ``warn`` / ``block`` for one proposed action, with the reasons."""

    decision: Decision
    reasons: list[str] = field(default_factory=list)
    risk_types: list[str] = field(default_factory=list)
    score: float = 0.0
    probability: float | None = None
    """The calibrated chance the action is unsafe, from what fired (None: nothing measured)."""
    latency_ms: float = 0.0
    over_budget: bool = False
    verdicts: list[Verdict] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    """The verdicts that are also alerts, as the live auditor would publish them."""
    guard: str = ""
    """Which guard decided (``gen_ai.guardrail.name``)."""

    @property
    def allow(self) -> bool:
        """Whether the action may run (``warn`` runs, and is recorded)."""
        return self.decision != Decision.BLOCK

    @property
    def reason(self) -> str | None:
        """The reasons as one line (``None`` when nothing was found)."""
        return "; ".join(self.reasons) or None

    def otel_attributes(self) -> dict[str, str | float | bool | list[str]]:
        """Span attributes for a GenAI ``apply_guardrail`` operation."""
        return {
            "gen_ai.operation.name": "apply_guardrail",
            "gen_ai.guardrail.name": self.guard,
            "gen_ai.guardrail.decision": self.decision.value,
            "gen_ai.guardrail.risk_types": self.risk_types,
            "gen_ai.guardrail.score": self.score,
            "gen_ai.guardrail.latency_ms": self.latency_ms,
            "gen_ai.guardrail.over_budget": self.over_budget,
        }
