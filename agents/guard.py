"""The guard hook: check a proposed action before it executes, and maybe block it.

The runner defines this small interface; the command line wires an implementation in
(for example the auditor's checker engine in guard mode). A blocked action is not
executed; the step is published with ``blocked=True`` and the reason, and the agent is
told it was blocked.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..schemas import Action, ChatMessage


@dataclass(frozen=True)
class ProposedAction:
    """What the guard sees: the action and its context."""

    episode_id: str
    env: str
    task_id: str
    step_index: int
    action: Action
    messages: list[ChatMessage]


@dataclass(frozen=True)
class GuardDecision:
    """Allow the action, or block it with a reason."""

    allow: bool
    reason: str | None = None


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
                return GuardDecision(False, f"matches guard pattern {pattern.pattern!r}")
        return GuardDecision(True)
