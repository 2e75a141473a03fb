"""The checker contract: a checker sees one step in its episode and returns findings.

A checker gets an :class:`~.view.EpisodeView`, built once per step by the engine and shared
by every checker: the step, the earlier steps of its episode (``view.context``, oldest
first), and what the trust model makes of them (the principal's request, what the agent
read, each call's action classes and provenance). A :class:`Finding` is what a checker
concludes; the engine turns findings into ``Verdict`` events (adding the checker's name,
version, kind, latency and a deterministic id). The kinds are ``rule``, ``heuristic``,
``model``, ``llm_judge`` and ``deep`` (the deep tier: run when an episode ends in the stream,
on every step in a batch audit). Per-episode checkers (``scope = "episode"``) report at the step
that completes a multi-step pattern.

Before any checker runs on a step the engine calls every checker's :meth:`Checker.prepare`
with the same view: the model checkers queue their texts there, so all of a step's texts
are embedded in one batched forward.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

from ...schemas import Evidence, Severity
from .risks import RiskType

if TYPE_CHECKING:
    from .view import EpisodeView

__all__ = ["Checker", "CheckerInfo", "Finding", "FindingList", "RiskType"]

CheckerKind = Literal["rule", "heuristic", "model", "llm_judge", "deep"]
Scope = Literal["step", "episode"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One conclusion of a checker about the current step (or the episode up to it).

    ``score`` is the checker's confidence (0–1) that the risk is present; ``severity`` how
    bad it is if so. ``undecided`` marks a checker that could not decide (a judge timed out).
    """

    risk_type: str
    score: float
    severity: Severity
    reason: str
    evidence: tuple[Evidence, ...] = ()
    undecided: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"Finding.score must be within [0, 1], got {self.score}")


FindingList = list[Finding]


class Checker(ABC):
    """Base of every checker. Subclasses set the class attributes and implement ``check``.

    ``check`` may be a plain method (rules, heuristics, models) or ``async`` (LLM judges);
    the engine awaits the latter under a timeout. Return an empty list when nothing is found.
    ``prepare`` (optional) runs on every checker before any ``check`` of the same step;
    ``warm`` (optional) loads models before a worker joins its group.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    kind: ClassVar[CheckerKind]
    scope: ClassVar[Scope] = "step"
    risk_types: ClassVar[tuple[str, ...]]
    description: ClassVar[str] = ""

    def warm(self) -> None:  # noqa: B027 (optional hook, no-op default)
        """Load what ``check`` needs (a model) now, not on the first step it judges."""

    def prepare(self, view: EpisodeView) -> None:  # noqa: B027 (optional hook, no-op default)
        """Get ready to judge ``view`` (e.g. queue texts for a shared batched forward)."""

    @abstractmethod
    def check(self, view: EpisodeView) -> FindingList | Awaitable[FindingList]:
        """Findings about ``view.step`` in its episode."""


@dataclass(frozen=True, slots=True)
class CheckerInfo:
    """What a registry lists about a checker (for ``--help`` and reports)."""

    name: str
    version: str
    kind: CheckerKind
    scope: Scope
    risk_types: tuple[str, ...]
    description: str = ""

    @classmethod
    def of(cls, checker: type[Checker] | Checker) -> CheckerInfo:
        """Info of a checker class or instance."""
        return cls(
            checker.name,
            checker.version,
            checker.kind,
            checker.scope,
            tuple(checker.risk_types),
            checker.description,
        )
