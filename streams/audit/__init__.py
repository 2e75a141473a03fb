"""The live safety auditor: checkers over the step stream, guard mode.

``api`` (the checker contract), ``registry`` (built-ins and ``safactory.checkers`` entry
points), ``engine`` (runs checkers, isolates failures, emits verdicts), ``checkers``
(rule / heuristic / model / LLM-judge), ``guard`` (in-process allow / warn / block),
``processor`` and ``live`` (the stream logic), ``worker`` (the live audit worker that wires
it). Recorded traces are imported and audited in batch by ``safactory.tools``.
"""

from .api import Checker, Finding, RiskType
from .engine import AuditEngine, Policy, StepAudit, TrajectoryResult
from .guard import AuditGuard, GuardDecision

__all__ = [
    "AuditEngine",
    "AuditGuard",
    "Checker",
    "Finding",
    "GuardDecision",
    "Policy",
    "RiskType",
    "StepAudit",
    "TrajectoryResult",
]
