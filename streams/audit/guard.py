"""Guard mode: the audit engine asked in-process about a proposed action before it runs.

The agents' runner defines its own small ``Guard`` protocol (``async check(proposal)``);
:class:`AuditGuard` satisfies it without either side importing the other: both use the
shared :class:`~safactory.schemas.guard.ProposedAction` and
:class:`~safactory.schemas.guard.GuardDecision`, and the command line
(``safactory simulate ... --guard audit``) wires it in. ``check`` takes either a ``Step``
plus the episode's earlier steps, or a proposal (any object with ``episode_id``, ``env``,
``task_id``, ``step_index``, ``action`` and ``messages``, the conversation so far).
``check_action`` and ``apply_guardrail`` are the same call. An action is blocked when the
engine's policy judges a finding severe (severity at or above ``Policy.block_at``, high by
default), exactly as the live audit worker decides.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ...schemas import Decision, Step
from ...schemas.guard import GuardDecision
from . import registry
from .engine import AuditEngine, Policy
from .processor import alert_of
from .text import message_text
from .user_rules import UserRules

GUARD_NAME = "safactory.audit.guard"
FAST_KINDS = ("rule", "heuristic")


class AuditGuard:
    """Judges proposed actions with an :class:`AuditEngine` within a latency budget.

    The decision is the strongest of the findings' calibrated decisions: ``block`` stops
    the action; ``warn`` and ``uncertain`` (it fired, but its precision was never measured
    high enough to act on) let it run and are recorded with their reasons.

    By default only the fast checkers (rules and heuristics) run, which keeps the guard in
    budget; pass an engine to choose others. Async checkers (judges) are bounded by the
    budget and come back ``undecided`` when over it; ``over_budget`` reports a slow call.
    """

    def __init__(self, engine: AuditEngine | None = None, budget_ms: float = 50.0) -> None:
        if engine is None:
            fast = [c for c in registry.create() if c.kind in FAST_KINDS]
            engine = AuditEngine(
                fast,
                policy=Policy(),
                judge_timeout_s=budget_ms / 1000.0,
                rules=UserRules.from_env(),  # the deployment's own rules, before any checker
            )
        self.engine = engine
        self.budget_ms = budget_ms

    async def check(self, step: Step | Any, context: Sequence[Step] = ()) -> GuardDecision:
        """Decide on the action in ``step`` given the episode so far (or on a proposal)."""
        started = time.perf_counter()
        if not isinstance(step, Step):
            step, context = steps_from_proposal(step)
        audit = await self.engine.audit_step(step, context)
        latency = (time.perf_counter() - started) * 1000.0
        decisive = [v for v in audit.verdicts if v.decision in (Decision.BLOCK, Decision.WARN)]
        uncertain = [v for v in audit.verdicts if v.decision == Decision.UNCERTAIN]
        alert_rank = self.engine.policy.alert_at.rank
        if any(v.decision == Decision.BLOCK for v in decisive):
            decision = Decision.BLOCK
        elif decisive:
            decision = Decision.WARN
        elif uncertain:
            decision = Decision.UNCERTAIN
        else:
            decision = Decision.ALLOW
        return GuardDecision(
            decision=decision,
            reasons=[f"{v.checker}: {v.reason}" for v in decisive]
            + [f"{v.checker} (uncertain): {v.reason}" for v in uncertain],
            risk_types=sorted({v.risk_type for v in decisive}),
            score=audit.score,
            probability=audit.probability,
            latency_ms=latency,
            over_budget=latency > self.budget_ms,
            verdicts=audit.all_verdicts,
            alerts=[
                alert_of(v)
                for v in audit.verdicts
                if v.decision == Decision.BLOCK and v.severity.rank >= alert_rank
            ],
            guard=GUARD_NAME,
        )

    check_action = check
    apply_guardrail = check


def steps_from_proposal(proposal: Any) -> tuple[Step, list[Step]]:
    """A runner's proposed action as (the step to judge, its context): the conversation so
    far becomes one context step (the task and tool outputs travel in its messages)."""
    try:
        base = {
            "episode_id": proposal.episode_id,
            "env": proposal.env,
            "task_id": proposal.task_id,
            "policy_version": 0,
        }
        messages = list(proposal.messages)
        action = proposal.action
        index = int(proposal.step_index)
    except AttributeError as exc:
        raise TypeError(
            f"guard got a {type(proposal).__name__}; pass a Step, or an object with episode_id, "
            "env, task_id, step_index, action and messages"
        ) from exc
    tool_output = "\n".join(message_text(m) for m in messages if m.role == "tool") or None
    context = [Step(**base, step_index=0, messages=messages, tool_result=tool_output)]
    return Step(**base, step_index=max(1, index), action=action), context
