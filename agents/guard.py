"""The guard hook: check a proposed action before it executes, and maybe block it.

The runner defines this small interface; the command line wires an implementation in
(``--guard audit``: the auditor's checker engine; ``--guard-pattern``: :class:`PatternGuard`).
A blocked action is not executed; the step is published with ``blocked=True`` and the
reason, and the agent is told it was blocked. The proposal and the decision are the shared
types of :mod:`safactory.schemas.guard`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from ..schemas import Decision
from ..schemas.guard import GuardDecision, ProposedAction

PATTERN_GUARD = "safactory.agents.pattern_guard"


@runtime_checkable
class Guard(Protocol):
    """Anything that can judge a proposed action before it runs."""

    async def check(self, proposal: ProposedAction) -> GuardDecision:
        """Decide on one proposed action."""
        ...


class PatternGuard:
    """Blocks actions whose text or tool arguments match any of the given regexes."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = [re.compile(p, re.IGNORECASE) for p in patterns]

    async def check(self, proposal: ProposedAction) -> GuardDecision:
        call = proposal.action.tool_call
        text = " ".join(
            filter(None, [proposal.action.text, call.function.arguments if call else None])
        )
        for pattern in self.patterns:
            if pattern.search(text):
                reason = f"matches guard pattern {pattern.pattern!r}"
                return GuardDecision(Decision.BLOCK, [reason], guard=PATTERN_GUARD)
        return GuardDecision(Decision.ALLOW, guard=PATTERN_GUARD)


class Guards:
    """Several guards asked in turn: the first that blocks decides, else the strongest of
    the others (warn, then uncertain, then allow)."""

    def __init__(self, guards: Sequence[Guard]) -> None:
        self.guards = list(guards)

    async def check(self, proposal: ProposedAction) -> GuardDecision:
        decisions = []
        for guard in self.guards:
            decision = await guard.check(proposal)
            if not decision.allow:
                return decision
            decisions.append(decision)
        found = {d.decision for d in decisions}
        strongest = next(
            (d for d in (Decision.WARN, Decision.UNCERTAIN) if d in found), Decision.ALLOW
        )
        return GuardDecision(
            strongest,
            reasons=[r for d in decisions for r in d.reasons],
            guard="+".join(d.guard for d in decisions),
        )


__all__ = ["Guard", "GuardDecision", "Guards", "PatternGuard", "ProposedAction"]
