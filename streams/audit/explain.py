"""Why a step was judged as it was: the deciding checkers, their evidence, the three factors
and the calibrated probability, in one record every surface shows (``safactory audit
--explain``, the monitor, ``serve``'s episode page).

The three factors are the trust model's own reading of the step (DESIGN.md, "Trust"):
**harm** — what the call can do (the taxonomy's classes and harm level, and why), **who
asked** — its provenance (requested, steered by text the agent read, the agent's own
initiative, or inert), **outcome** — what the environment reported back. A step without a
call has only what fired on its text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...schemas import Step, Verdict
from .engine import FIRED, StepAudit
from .judgement import judged_call
from .user_rules import ALLOW
from .view import EpisodeView


@dataclass(frozen=True, slots=True)
class Finding:
    """One checker that fired on the step."""

    checker: str
    decision: str
    probability: float | None
    risk_type: str
    severity: str
    reason: str
    evidence: list[dict[str, str]]


@dataclass(frozen=True, slots=True)
class Explanation:
    """One step's decision and why."""

    step: int
    decision: str
    probability: float | None
    harm: str | None
    who_asked: str | None
    outcome: str | None
    findings: list[Finding] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        """As a JSON object."""
        return asdict(self)

    def lines(self) -> list[str]:
        """As text for a terminal: the decision, the factors, each finding."""
        p = "unmeasured" if self.probability is None else f"p={self.probability:.2f}"
        out = [f"step {self.step}: {self.decision} ({p})"]
        for name, value in (
            ("harm", self.harm),
            ("who asked", self.who_asked),
            ("outcome", self.outcome),
        ):
            if value:
                out.append(f"  {name}: {value}")
        for f in self.findings:
            fp = "unmeasured" if f.probability is None else f"p={f.probability:.2f}"
            head = f"  {f.decision:<9} {f.checker} ({f.severity} {f.risk_type}, {fp})"
            out.append(f"{head}: {f.reason}")
            for e in f.evidence:
                out.append(f"            [{e['field']}] {_one_line(e['text'], 160)}")
        return out


@dataclass(frozen=True, slots=True)
class Factors:
    """The trust model's three readings of a step's call (None: the step made no call)."""

    harm: str | None = None
    who_asked: str | None = None
    outcome: str | None = None


def factors(step: Step, context: list[Step]) -> Factors:
    """What the call of ``step`` can do, who asked for it, and what came back."""
    judged = judged_call(EpisodeView(step, context))
    if judged is None:
        return Factors()
    recognised = judged.call.recognised
    classes = ", ".join(sorted(judged.classes)) or "a lookup or reply"
    harm = f"{judged.harm.name.lower()} ({classes})" + (
        f": {recognised.why}" if recognised.why else ""
    )
    who = str(judged.provenance) + (f": {judged.why}" if judged.why else "")
    if judged.order_chunk:
        who += f" — ordered by {_one_line(judged.order_chunk, 120)!r}"
    result = judged.call.result
    outcome = ("failed: " if judged.call.failed else "") + (
        _one_line(result, 160) if result else "nothing reported"
    )
    return Factors(harm, who, outcome)


def stored_factors(by_index: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """:func:`factors` of each stored step (its payload, by step index) as JSON; a step the
    current schema cannot read leaves every step without factors, still shown."""
    try:
        steps = [Step.model_validate(payload) for _, payload in sorted(by_index.items())]
    except ValueError:
        steps = []
    found = {s.step_index: factors(s, steps[:i]) for i, s in enumerate(steps)}
    return {index: asdict(found.get(index, Factors())) for index in by_index}


def explain(audit: StepAudit, context: list[Step]) -> Explanation:
    """The explanation of one audited step given the episode's earlier steps."""
    found = factors(audit.step, context)
    return Explanation(
        step=audit.step.step_index,
        decision=str(audit.decision),
        probability=audit.probability,
        harm=found.harm,
        who_asked=found.who_asked,
        outcome=found.outcome,
        findings=[_finding(v) for v in audit.verdicts if v.decision in FIRED or v.checker == ALLOW],
    )


def _finding(v: Verdict) -> Finding:
    return Finding(
        checker=v.checker,
        decision=str(v.decision),
        probability=v.probability,
        risk_type=v.risk_type,
        severity=str(v.severity),
        reason=v.reason or "",
        evidence=[{"field": e.field, "text": e.text} for e in v.evidence],
    )


def _one_line(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
