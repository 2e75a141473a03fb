"""The audit engine: runs every checker on a step, isolates failures, emits verdicts.

One engine serves the three uses: the stream worker (per step, as events arrive), guard
mode (a proposed action before it runs) and batch audit (recorded traces). A checker that
raises yields a ``checker_error`` verdict and the others go on; an ``async`` checker (an LLM
judge) that overruns ``judge_timeout_s`` yields an ``undecided`` verdict, so a slow judge
never holds the stream up. A caller that has fallen behind may ask for the fast tier only
(``fast_only``): rules and heuristics run, and every other checker gets an ``undecided``
verdict saying it was not run and why, so shed work is visible in the data.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ...infra.embedding import set_threads
from ...schemas import Decision, Evidence, Severity, Step, Verdict, derive_id
from . import registry
from .api import Checker, Finding, RiskType
from .calibration import Calibration, default_calibration
from .judge_tier import JudgeConfig, JudgeTier, render_case
from .user_rules import UserRules
from .view import EpisodeView

ENGINE_NAME = "safactory.audit"
ENGINE_VERSION = "1"
SUMMARY_CHECKER = "audit.summary"
JUDGE_CHECKER = "judge"
"""The judge tier's verdict on a step the checkers left uncertain."""
DEEP_SUMMARY_CHECKER = "audit.deep_summary"
"""The summary of a step's deep-tier verdicts (a verdict of its own, emitted at episode end)."""
FAST_KINDS = frozenset({"rule", "heuristic"})
"""Checker kinds that stay on when the model tier is shed (microseconds per step)."""
DEEP_KINDS = frozenset({"deep"})
"""Checker kinds of the deep tier: in the stream they judge an episode once it ended."""
Tier = Literal["step", "end", "all"]
"""Which checkers a call runs: ``step`` all but the deep tier (the stream, step by step),
``end`` the deep tier only (the stream, once the episode ended), ``all`` every one (batch)."""

_DECISION_RANK = {
    Decision.ALLOW: 0,
    Decision.CHECKER_ERROR: 1,
    Decision.UNDECIDED: 2,
    Decision.UNCERTAIN: 3,
    Decision.WARN: 4,
    Decision.BLOCK: 5,
}
FIRED = frozenset({Decision.BLOCK, Decision.WARN, Decision.UNCERTAIN})
"""Decisions of findings that fired (the others found nothing, or could not answer)."""


@dataclass(frozen=True, slots=True)
class Policy:
    """How findings become decisions (``streams/audit/calibration.py``): a finding fires
    when ``score >= threshold`` and its severity is not none; a firing blocks, warns or
    stays uncertain by its checker's measured precision at that score (blocking needs
    severity ``block_at`` or above); verdicts at or above ``alert_at`` are also alerts."""

    threshold: float = 0.5
    block_at: Severity = Severity.HIGH
    alert_at: Severity = Severity.HIGH
    calibration: Calibration = field(default_factory=default_calibration)

    def decide(self, checker: str, finding: Finding) -> tuple[Decision, float | None]:
        """The decision one finding of ``checker`` earns, and its calibrated probability."""
        if finding.undecided:
            return Decision.UNDECIDED, None
        if finding.score < self.threshold or finding.severity == Severity.NONE:
            return Decision.ALLOW, None
        cell = self.calibration.cell(checker, finding.score)
        if cell is None:
            return Decision.UNCERTAIN, None
        return cell.decision(finding.severity, self.block_at), cell.probability


@dataclass(slots=True)
class StepAudit:
    """The engine's result for one step: every finding's verdict and the step summary."""

    step: Step
    verdicts: list[Verdict]
    summary: Verdict
    score: float
    """Highest score of a blocking or warning finding (0 when none)."""
    unsafe: bool
    """A finding blocked."""
    risk_types: list[str] = field(default_factory=list)
    """Risk types of the blocking findings."""

    @property
    def decision(self) -> Decision:
        """The step's decision: the strongest of its findings'."""
        return self.summary.decision

    @property
    def probability(self) -> float | None:
        """The highest calibrated probability of what fired (None: nothing measured fired)."""
        return self.summary.probability

    @property
    def all_verdicts(self) -> list[Verdict]:
        """Finding verdicts followed by the summary (what the stream worker emits)."""
        return [*self.verdicts, self.summary]


class AuditEngine:
    """Runs a fixed set of checkers; see the module docstring."""

    def __init__(
        self,
        checkers: Sequence[Checker],
        *,
        policy: Policy | None = None,
        judge_timeout_s: float = 2.0,
        judge: JudgeTier | None = None,
        rules: UserRules | None = None,
    ) -> None:
        names = [c.name for c in checkers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"checker(s) listed twice: {', '.join(duplicates)}")
        self.checkers = list(checkers)
        self.policy = policy or Policy()
        self.judge_timeout_s = judge_timeout_s
        """How long an ``async`` checker may take."""
        self.judge = judge
        """The judge tier: decides the steps whose findings stayed uncertain."""
        self.rules = rules
        """The deployment's own allow and deny rules, asked before any checker."""
        tiers: dict[Tier, list[Checker]] = {
            "step": [c for c in self.checkers if c.kind not in DEEP_KINDS],
            "end": [c for c in self.checkers if c.kind in DEEP_KINDS],
            "all": self.checkers,
        }
        self._tiers = {tier: (cs, [c for c in cs if _prepares(c)]) for tier, cs in tiers.items()}
        """Per tier: its checkers, and those of them with a ``prepare`` of their own."""

    def warm(self) -> None:
        """Load every checker's models now (before a worker joins its group)."""
        for checker in self.checkers:
            checker.warm()

    async def audit_step(
        self,
        step: Step,
        context: Sequence[Step] = (),
        *,
        fast_only: str | None = None,
        tier: Tier = "step",
        final: bool = False,
    ) -> StepAudit:
        """Run the ``tier``'s checkers on ``step`` (``context``: earlier steps, oldest first);
        with ``fast_only`` (the reason, e.g. "worker 40 s behind"), only the fast tier;
        ``final``: ``step`` is the last of its episode."""
        view = EpisodeView(step, list(context), final=final)
        if self.rules is not None and (rule := self.rules.rule_on(view)) is not None:
            ruled = self.rules.verdict(rule, view, ENGINE_NAME, ENGINE_VERSION)
            audit = self._summarise(step, [ruled], tier)
            audit.summary = audit.summary.model_copy(update={"reason": ruled.reason})
            return audit
        checkers, preparing = self._tiers[tier]
        verdicts: list[Verdict] = []
        if fast_only is not None:
            shed = [c for c in checkers if c.kind not in FAST_KINDS]
            checkers = [c for c in checkers if c.kind in FAST_KINDS]
            preparing = [c for c in preparing if c.kind in FAST_KINDS]
            verdicts += [self._shed(step, c, fast_only) for c in shed]
        failed: dict[str, float] = {}
        for checker in preparing:
            started = time.perf_counter()
            try:
                checker.prepare(view)
            except Exception as exc:
                verdicts.append(self._error(step, checker, exc, started))
                failed[checker.name] = started
        pending: list[tuple[Checker, float, Awaitable[list[Finding]]]] = []
        clock = time.perf_counter
        for checker in checkers:
            if failed and checker.name in failed:
                continue
            started = clock()
            try:
                result = checker.check(view)
            except Exception as exc:
                verdicts.append(self._error(step, checker, exc, started))
                continue
            if type(result) is not list and inspect.isawaitable(result):  # list: the fast path
                pending.append((checker, started, result))
            elif result:
                verdicts.extend(self._verdicts(step, checker, result, started))
        if pending:
            outcomes = await asyncio.gather(
                *(self._await_judge(aw) for _, _, aw in pending), return_exceptions=True
            )
            for (checker, started, _), outcome in zip(pending, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    verdicts.append(self._error(step, checker, outcome, started))
                else:
                    verdicts.extend(self._verdicts(step, checker, outcome, started))
        unsure = [v for v in verdicts if v.decision == Decision.UNCERTAIN]
        if self.judge is not None and unsure and not any(v.decision.acted_on for v in verdicts):
            verdicts.append(await self._escalate(view, unsure))
        return self._summarise(step, verdicts, tier)

    async def _escalate(self, view: EpisodeView, unsure: list[Verdict]) -> Verdict:
        """The judge tier's verdict on a step the checkers left uncertain."""
        assert self.judge is not None
        started = time.perf_counter()
        ruling = await self.judge.rule(render_case(view, unsure))
        step = view.step
        if ruling.unsafe is None:
            decision, severity, score, probability = Decision.UNCERTAIN, Severity.NONE, 0.0, None
        elif ruling.unsafe:
            decision, severity = Decision.BLOCK, Severity.HIGH
            score = probability = ruling.confidence
        else:
            decision, severity = Decision.ALLOW, Severity.NONE
            score, probability = 0.0, 1.0 - ruling.confidence
        return Verdict(
            event_id=derive_id(ENGINE_NAME, ENGINE_VERSION, step.event_id, JUDGE_CHECKER),
            episode_id=step.episode_id,
            source_event_id=step.event_id,
            step_index=step.step_index,
            env=step.env,
            checker=JUDGE_CHECKER,
            checker_kind="llm_judge",
            risk_type=RiskType.UNSAFE_BEHAVIOUR,
            severity=severity,
            score=score,
            decision=decision,
            probability=probability,
            evidence=[Evidence(text=ruling.reason[:500], field="judge")] if ruling.reason else [],
            reason=f"judge tier: {ruling.reason}"[:2000],
            latency_ms=(time.perf_counter() - started) * 1000.0,
            policy_version=step.policy_version,
            trace_id=step.trace_id,
        )

    async def audit_episode(self, steps: Iterable[Step], *, tier: Tier = "all") -> list[StepAudit]:
        """Audit each step of one episode in order, each with the steps before it (every
        checker by default: a whole recorded episode is at hand)."""
        ordered = list(steps)
        done: list[Step] = []
        out = []
        for index, step in enumerate(ordered):
            last = index == len(ordered) - 1
            out.append(await self.audit_step(step, done, tier=tier, final=last))
            done.append(step)
        return out

    async def _await_judge(self, awaitable: Awaitable[list[Finding]]) -> list[Finding]:
        try:
            return await asyncio.wait_for(awaitable, self.judge_timeout_s)
        except TimeoutError:
            return [
                Finding(
                    RiskType.UNSAFE_BEHAVIOUR,
                    0.0,
                    Severity.NONE,
                    f"no answer within {self.judge_timeout_s:g}s",
                    undecided=True,
                )
            ]

    def _verdicts(
        self, step: Step, checker: Checker, findings: list[Finding], started: float
    ) -> list[Verdict]:
        latency = (time.perf_counter() - started) * 1000.0
        out = []
        for index, finding in enumerate(findings):
            if not isinstance(finding, Finding):
                raise TypeError(f"checker {checker.name!r} returned {type(finding).__name__}")
            decision, probability = self.policy.decide(checker.name, finding)
            out.append(
                Verdict(
                    event_id=derive_id(
                        ENGINE_NAME,
                        ENGINE_VERSION,
                        step.event_id,
                        checker.name,
                        checker.version,
                        finding.risk_type,
                        index,
                    ),
                    episode_id=step.episode_id,
                    source_event_id=step.event_id,
                    step_index=step.step_index,
                    env=step.env,
                    checker=checker.name,
                    checker_version=checker.version,
                    checker_kind=checker.kind,
                    risk_type=finding.risk_type,
                    severity=finding.severity,
                    score=finding.score,
                    decision=decision,
                    probability=probability,
                    evidence=list(finding.evidence),
                    reason=finding.reason,
                    latency_ms=latency,
                    policy_version=step.policy_version,
                    trace_id=step.trace_id,
                )
            )
        return out

    def _shed(self, step: Step, checker: Checker, why: str) -> Verdict:
        return _no_finding(step, checker, "shed", "none", Decision.UNDECIDED, f"not run: {why}")

    def _error(self, step: Step, checker: Checker, exc: BaseException, started: float) -> Verdict:
        return _no_finding(
            step,
            checker,
            RiskType.CHECKER_ERROR,
            RiskType.CHECKER_ERROR,
            Decision.CHECKER_ERROR,
            f"{type(exc).__name__}: {exc}",
            (time.perf_counter() - started) * 1000.0,
        )

    def _summarise(self, step: Step, verdicts: list[Verdict], tier: Tier = "step") -> StepAudit:
        """The step's summary verdict: the strongest decision of its findings, the highest
        calibrated probability and score of what fired, the reasons of what fired."""
        top: Verdict | None = None
        top_key: tuple[int, int, float] = (-1, -1, 0.0)
        severity = Severity.NONE
        score = 0.0
        probability: float | None = None
        blocking: set[str] = set()
        reasons: list[str] = []
        latency = 0.0
        ruled = any(
            v.checker == JUDGE_CHECKER and v.decision != Decision.UNCERTAIN for v in verdicts
        )
        for v in verdicts:
            latency += v.latency_ms
            if ruled and v.decision == Decision.UNCERTAIN:
                continue  # the judge tier decided what the checkers could not
            key = (_DECISION_RANK[v.decision], v.severity.rank, v.score)
            if top is None or key > top_key:
                top, top_key = v, key
            if v.decision not in FIRED:
                continue
            reasons.append(f"{v.checker} ({v.decision}): {v.reason}")
            severity = v.severity if v.severity.rank > severity.rank else severity
            if v.probability is not None:
                probability = max(probability or 0.0, v.probability)
            if v.decision != Decision.UNCERTAIN:
                score = max(score, v.score)
            if v.decision == Decision.BLOCK:
                blocking.add(v.risk_type)
        decision = top.decision if top else Decision.ALLOW
        summary = Verdict(
            event_id=derive_id(
                ENGINE_NAME,
                ENGINE_VERSION,
                step.event_id,
                SUMMARY_CHECKER,
                *([tier] if tier == "end" else []),
            ),
            episode_id=step.episode_id,
            source_event_id=step.event_id,
            step_index=step.step_index,
            env=step.env,
            checker=SUMMARY_CHECKER if tier != "end" else DEEP_SUMMARY_CHECKER,
            checker_version=ENGINE_VERSION,
            checker_kind="composite",
            risk_type=(top.risk_type if top and reasons else "none"),
            severity=severity,
            score=score,
            decision=decision,
            probability=probability,
            reason=("; ".join(reasons) or "no risk found")[:2000],
            latency_ms=latency,
            policy_version=step.policy_version,
            trace_id=step.trace_id,
        )
        unsafe = decision == Decision.BLOCK
        return StepAudit(step, verdicts, summary, score, unsafe, sorted(blocking))


def configured_engine(
    checkers: str | None = None, judge_timeout_s: float = 2.0, threads: int | None = None
) -> AuditEngine:
    """The comma-separated ``checkers`` (None: the defaults; ``-NAME`` leaves one out of
    the defaults, or of the names listed), with the judge tier when ``SF_AUDIT_JUDGE_URL``
    names one, and the deployment's rules (``SF_AUDIT_RULES``); ``threads`` for its model
    checkers' encoders. ``ValueError`` says what cannot be built (an unknown checker, missing
    weights)."""
    listed = [n.strip() for n in (checkers or "").split(",") if n.strip()]
    names = [n for n in listed if not n.startswith("-")] or None
    if without := {n[1:] for n in listed if n.startswith("-")}:
        unknown = sorted(without - set(registry.available()))
        if unknown:
            raise ValueError(f"--checkers: no checker {', '.join(unknown)} to leave out")
        names = [n for n in names or registry.default_names() if n not in without]
    try:
        config = JudgeConfig.from_env()
        judge = JudgeTier(config) if config is not None else None
        rules = UserRules.from_env()
        engine = AuditEngine(
            registry.create(names), judge_timeout_s=judge_timeout_s, judge=judge, rules=rules
        )
    except (registry.RegistryError, FileNotFoundError) as exc:
        raise ValueError(str(exc)) from exc
    if threads is not None and any(c.kind == "model" for c in engine.checkers):
        set_threads(threads)
    return engine


def _prepares(checker: Checker) -> bool:
    """``checker`` has a ``prepare`` of its own (the default does nothing)."""
    return getattr(checker.prepare, "__func__", None) is not Checker.prepare


@dataclass(frozen=True, slots=True)
class TrajectoryResult:
    """Trajectory-level outcome of a batch audit (one line of ``safactory audit --out``)."""

    id: str
    unsafe: bool
    """A step was blocked."""
    decision: Decision
    """The strongest decision of any step: block, warn, uncertain or allow."""
    probability: float | None
    """The highest calibrated probability of what fired."""
    score: float
    risk_types: list[str]
    first_unsafe_step: int | None

    @classmethod
    def of(cls, record_id: str, audits: Sequence[StepAudit]) -> TrajectoryResult:
        """Fold the step audits of one trajectory."""
        first = next((a.step.step_index for a in audits if a.unsafe), None)
        kinds = sorted({r for a in audits for r in a.risk_types})
        score = max((a.score for a in audits), default=0.0)
        decision = max(
            (a.decision for a in audits), key=_DECISION_RANK.__getitem__, default=Decision.ALLOW
        )
        probabilities = [a.probability for a in audits if a.probability is not None]
        probability = round(max(probabilities), 4) if probabilities else None
        return cls(
            record_id, first is not None, decision, probability, round(score, 6), kinds, first
        )

    def as_json(self) -> dict[str, object]:
        """The JSON line of the batch audit output."""
        return {
            "id": self.id,
            "unsafe": self.unsafe,
            "decision": str(self.decision),
            "probability": self.probability,
            "score": self.score,
            "risk_types": self.risk_types,
            "first_unsafe_step": self.first_unsafe_step,
        }


def _no_finding(
    step: Step,
    checker: Checker,
    tag: str,
    risk_type: str,
    decision: Decision,
    reason: str,
    latency_ms: float = 0.0,
) -> Verdict:
    """A checker's verdict that judged nothing (it crashed, or was not run): severity none,
    score 0, its id derived from the step, the checker and ``tag``."""
    return Verdict(
        event_id=derive_id(
            ENGINE_NAME, ENGINE_VERSION, step.event_id, checker.name, checker.version, tag
        ),
        episode_id=step.episode_id,
        source_event_id=step.event_id,
        step_index=step.step_index,
        env=step.env,
        checker=checker.name,
        checker_version=checker.version,
        checker_kind=checker.kind,
        risk_type=risk_type,
        severity=Severity.NONE,
        score=0.0,
        decision=decision,
        reason=reason[:2000],
        latency_ms=latency_ms,
        policy_version=step.policy_version,
        trace_id=step.trace_id,
    )
