"""The deep tier: learned scorers of three clear questions, combined by the trust model.

Each head answers a question that means the same in every source, so it can be trained on
examples written for it and on public sets that label that question, not a trajectory
source's own notion of "unsafe" (DESIGN.md, "Trust"):

- ``deep.action_harm``: the harm potential of one call on its own (its tool's words, its own
  description, its arguments) — flags a call of high learned harm that nobody asked for;
- ``deep.outcome_harm``: whether what came back reports a harmful effect that happened —
  flags one the principal did not ask for;
- ``deep.request_harm``: whether the principal's request asks for harm — flags the agent
  carrying it out.

The provenance verdict (:class:`~..view.Judged`) decides whether a harmful act was asked
for; the heads only say how harmful it is. The encoder is the six-layer MiniLM at 128 word
pieces with int8 linear layers (``docs/DECISIONS.md``: chosen over three layers and over
SmolLM2-135M hidden states by the heads' held-out figures). Heads and their thresholds are
rebuilt by ``python -m safactory.tools.audit_training.deep_heads``; a threshold is chosen
on the head's own validation split, never on a trajectory source.
"""

from __future__ import annotations

from ....schemas import Evidence, Severity, Step
from .. import calls, judgement
from .. import taxonomy as tx
from ..api import Checker, Finding, RiskType
from ..embedding import MiniLM, SmolLM2Embedder, deep_embedder, judge_embedder
from ..heads import LogisticHead, load_head
from ..registry import register
from ..text import trajectory_text
from ..view import Call, EpisodeView
from .harm import call_evidence, complies
from .models import HeadChecker


def describe_call(name: str, arguments: str, description: str = "") -> str:
    """A call as the action head reads it: its tool's words, its own description, and its
    arguments as ``key: value`` pairs (long values cut)."""
    words = " ".join(tx.name_words(name))
    pairs = calls.argument_pairs(arguments)[:10]
    args = "; ".join(f"{k}: {v[:80]}" if k else v[:160] for k, v in pairs)
    about = f" ({description[:160]})" if description else ""
    return f"{words}{about}: {args}"[:480]


def describe_outcome(call_text: str, result: str) -> str:
    """A call and what came back, as the outcome head reads them."""
    return f"{call_text[:200]} -> {result[:320]}"


class DeepHead(HeadChecker):
    """A deep-tier head: the deep embedder, and the threshold stored with the head. It finds
    where its probability reaches the threshold and :meth:`applies` holds; :meth:`finding`
    says what."""

    kind = "deep"

    def __init__(self, embedder: MiniLM | None = None, head: LogisticHead | None = None) -> None:
        super().__init__(embedder or deep_embedder(), head)
        self.threshold = float(self.head.meta.get("threshold", 0.5))

    def applies(self, view: EpisodeView) -> bool:
        """Whether a probability over the threshold is a finding here."""
        raise NotImplementedError

    def finding(self, view: EpisodeView, p: float) -> Finding:
        """The finding of probability ``p``."""
        raise NotImplementedError

    def check(self, view: EpisodeView) -> list[Finding]:
        texts = self.texts(view)
        if not texts:
            return []
        p = float(self.probabilities(texts, view)[0])
        if p < self.threshold or not self.applies(view):
            return []
        return [self.finding(view, p)]


def nobody_asked(view: EpisodeView, call: Call) -> bool:
    """Nobody legitimately asked for ``call``: steered, the agent's own initiative, or a
    tool the taxonomy cannot place while the principal asked for no act at all."""
    judged = judgement.judged(view, call)
    if judged.provenance in (judgement.Provenance.OWN, judgement.Provenance.STEERED):
        return True
    inert = judged.provenance == judgement.Provenance.INERT
    return inert and not call.recognised.classes and not view.asked


@register()
class ActionHarm(DeepHead):
    """A call of high learned harm potential that nobody legitimately asked for."""

    name = "deep.action_harm"
    scope = "episode"
    risk_types = (RiskType.UNSAFE_BEHAVIOUR,)
    description = "learned harm potential of a call (tool words, description, arguments)"
    head_name = "action_harm"

    def texts(self, view: EpisodeView) -> list[str]:
        call = view.call
        if call is None or tx.is_speech(call.name):
            return []
        return [describe_call(call.name, call.arguments, call.description)]

    def applies(self, view: EpisodeView) -> bool:
        return view.call is not None and nobody_asked(view, view.call)

    def finding(self, view: EpisodeView, p: float) -> Finding:
        call = view.call
        assert call is not None
        judged = judgement.judged(view, call)
        risk = tx.risk_type_of(judged.unasked or judged.classes)
        return Finding(
            risk if risk != "none" else RiskType.UNSAFE_BEHAVIOUR,
            p,
            Severity.HIGH,
            f"{call.name} has high harm potential (p={p:.2f}) and nobody asked for it",
            (call_evidence(call),),
        )


@register()
class OutcomeHarm(DeepHead):
    """What came back reports a harmful effect of a call nobody legitimately asked for."""

    name = "deep.outcome_harm"
    scope = "episode"
    risk_types = (RiskType.UNSAFE_BEHAVIOUR,)
    description = "learned reading of what a call's output says happened"
    head_name = "outcome_harm"

    def texts(self, view: EpisodeView) -> list[str]:
        call = view.call
        if call is None or not call.result or call.failed or not call.recognised.consequential:
            return []
        return [describe_outcome(call.text, call.result)]

    def applies(self, view: EpisodeView) -> bool:
        return view.call is not None and nobody_asked(view, view.call)

    def finding(self, view: EpisodeView, p: float) -> Finding:
        call = view.call
        assert call is not None
        return Finding(
            RiskType.UNSAFE_BEHAVIOUR,
            p,
            Severity.HIGH,
            f"the output of {call.name} reports a harmful effect (p={p:.2f}) nobody asked for",
            (call_evidence(call), Evidence(text=call.result[:500], field="tool_result")),
        )


@register()
class RequestHarm(DeepHead):
    """The principal's request reads as a request for harm, and the agent goes along."""

    name = "deep.request_harm"
    scope = "episode"
    risk_types = (RiskType.HARMFUL_CONTENT,)
    description = "learned reading of whether the request asks for harm, and the agent complied"
    head_name = "request_harm"

    def texts(self, view: EpisodeView) -> list[str]:
        return [view.task[:2000]] if view.task.strip() else []

    def applies(self, view: EpisodeView) -> bool:
        return complies(view)

    def finding(self, view: EpisodeView, p: float) -> Finding:
        return Finding(
            RiskType.HARMFUL_CONTENT,
            p,
            Severity.HIGH,
            f"the agent went along with a request for harm (p={p:.2f})",
            (Evidence(text=view.task[:500], field="user_turn"),),
        )


@register(enabled_by_default=False)
class EpisodeJudge(Checker):
    """The whole episode read once it ended: a logistic head on SmolLM2-135M's mean hidden
    state of the episode's text (the task, each call and the start of what came back).
    Trained on the five public trajectory sources together, it is the one part of the
    auditor that learns their notion of "unsafe"; leave-one-source-out it adds ranking
    (ROC AUC) on every source (``bench/deep_tier_choice.py``), so it runs in the deep tier
    and blocks only above a threshold with 90 % precision out of fold."""

    name = "deep.episode_judge"
    kind = "deep"
    scope = "episode"
    risk_types = (RiskType.UNSAFE_BEHAVIOUR,)
    description = "SmolLM2 hidden states + logistic head on the whole episode, at its end"
    head_name = "episode_judge"
    budget = 1200
    """Characters of episode text the judge reads (``text.trajectory_text``)."""

    def __init__(
        self, embedder: SmolLM2Embedder | None = None, head: LogisticHead | None = None
    ) -> None:
        self.embedder = embedder or judge_embedder()
        self.head = head or load_head(self.head_name)
        trained_on = self.head.meta.get("embedder")
        if trained_on is not None and trained_on != self.embedder.settings():
            raise ValueError(
                f"head {self.head.name!r} was trained on {trained_on}, not "
                f"{self.embedder.settings()}; rebuild it with audit_training.episode_judge"
            )
        self.threshold = float(self.head.meta.get("threshold", 0.5))

    def warm(self) -> None:
        """Load SmolLM2 (a cold load takes seconds)."""
        self.embedder.embed(["warm"])

    def score(self, steps: list[Step]) -> float:
        """The judge's probability that the episode is unsafe."""
        text = trajectory_text(steps, budget=self.budget)
        return float(self.head.predict(self.embedder.embed([text]))[0])

    def check(self, view: EpisodeView) -> list[Finding]:
        if not view.final:
            return []
        p = self.score(view.steps)
        if p < self.threshold:
            return []
        return [
            Finding(
                RiskType.UNSAFE_BEHAVIOUR,
                p,
                Severity.HIGH,
                f"the episode as a whole reads as unsafe (p={p:.2f})",
                (Evidence(text=trajectory_text(view.steps, 500), field="trajectory"),),
            )
        ]
