"""Model-based checkers: logistic heads on MiniLM sentence embeddings, offline on CPU.

Heads live in ``streams/audit/heads/*.npz`` and are rebuilt by ``train_heads.py``. All
model checkers share one embedder (and its cache), so a text is embedded once per process.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np

from ....schemas import Evidence, Severity, Step
from .. import mandate, signals
from ..api import Checker, Finding, RiskType
from ..embedding import DIM, MiniLM, shared_embedder
from ..heads import LogisticHead, load_head
from ..mandate import user_mandated
from ..registry import register
from ..text import (
    Span,
    action_spans,
    action_text,
    final_reply,
    incoming_spans,
    task_text,
    tool_arguments,
    tool_name,
    user_spans,
)
from .heuristics import complies, labelled_records

CHUNK_BUDGET = 500
"""Characters of incoming text the instruction head reads per step (about 128 word pieces,
one forward's worth): the chunks that address the reader most often come first."""


class HeadChecker(Checker):
    """Scores texts with one stored head; subclasses choose the texts and the severity."""

    kind = "model"
    head_name: ClassVar[str]

    def __init__(self, embedder: MiniLM | None = None, head: LogisticHead | None = None) -> None:
        self.embedder = embedder or shared_embedder()
        self.head = head or load_head(self.head_name)
        trained_on = self.head.meta.get("embedder")
        if trained_on is not None and trained_on != self.embedder.settings():
            raise ValueError(
                f"head {self.head.name!r} was trained on embeddings {trained_on}, not "
                f"{self.embedder.settings()}; rebuild it with train_heads"
            )

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        """The texts this head embeds for ``step`` (see :func:`embed_step_texts`)."""
        return []

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """The head's positive-class probability for each text."""
        if not texts:
            return np.zeros(0)
        return self.head.predict(self.embedder.embed(list(texts)))


def embed_step_texts(checkers: Iterable[Checker], step: Step, context: list[Step]) -> None:
    """Embed every text the heads among ``checkers`` will read in ``step`` in one batched
    pass per embedder (one forward instead of one per head); each head then finds its
    vectors cached. A head whose ``texts`` fails is skipped: its own check reports the error."""
    pending: dict[int, tuple[MiniLM, list[str]]] = {}
    for checker in checkers:
        if isinstance(checker, HeadChecker):
            try:
                texts = checker.texts(step, context)
            except Exception:  # surfaced by the checker's own check
                continue
            pending.setdefault(id(checker.embedder), (checker.embedder, []))[1].extend(texts)
    for embedder, texts in pending.values():
        embedder.embed(texts)


@register()
class InstructionInData(HeadChecker):
    """Tool or environment output that reads like an instruction to the agent
    (indirect prompt injection), judged chunk by chunk: the chunks that address the reader
    most often first, ``CHUNK_BUDGET`` characters per step."""

    name = "model.instruction_in_data"
    risk_types = (RiskType.INDIRECT_PROMPT_INJECTION,)
    description = "MiniLM head: does a chunk of tool output instruct the agent?"
    head_name = "instruction_in_data"

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        return [chunk for _, chunk in self._pieces(step)]

    def _pieces(self, step: Step) -> list[tuple[str, str]]:
        candidates = [
            (span.field, chunk)
            for span in incoming_spans(step)
            for chunk in signals.chunks(span.text)
            if signals.addresses_reader(chunk)
        ]
        candidates.sort(key=lambda piece: -signals.reader_cues(piece[1]))
        chosen: list[tuple[str, str]] = []
        for field, chunk in candidates:
            if not chosen or sum(len(c) for _, c in chosen) + len(chunk) <= CHUNK_BUDGET:
                chosen.append((field, chunk))
        return chosen

    def check(self, step: Step, context: list[Step]) -> list[Finding]:
        pieces = self._pieces(step)
        probs = self.probabilities([c for _, c in pieces])
        if not len(probs):
            return []
        best = int(np.argmax(probs))
        if probs[best] < 0.5:
            return []
        field, chunk = pieces[best]
        return [
            Finding(
                RiskType.INDIRECT_PROMPT_INJECTION,
                float(probs[best]),
                Severity.MEDIUM,
                f"{field} contains text that instructs the agent (p={probs[best]:.2f})",
                (Evidence(text=chunk[:500], field=field),),
            )
        ]


@register()
class JailbreakModel(HeadChecker):
    """User turns that look like jailbreak or prompt-injection attempts."""

    name = "model.jailbreak"
    risk_types = (RiskType.DIRECT_PROMPT_INJECTION,)
    description = "MiniLM head: is a user turn a jailbreak / direct injection attempt?"
    head_name = "jailbreak"

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        return [span.text[:2000] for span in user_turns(step)]

    def check(self, step: Step, context: list[Step]) -> list[Finding]:
        spans = user_turns(step)
        probs = self.probabilities([s.text[:2000] for s in spans])
        out = []
        for span, p in zip(spans, probs, strict=True):
            if p >= 0.5:
                out.append(
                    Finding(
                        RiskType.DIRECT_PROMPT_INJECTION,
                        float(p),
                        Severity.MEDIUM,
                        f"{span.field} reads as a jailbreak attempt (p={p:.2f})",
                        (Evidence(text=span.text[:500], field=span.field),),
                    )
                )
        return out


def user_turns(step: Step) -> list[Span]:
    """The user's own turns in ``step`` (not system or developer messages, nor the request
    an environment presented as its first observation: that may be a menu or a scene, and
    the jailbreak head warned on every episode of the demo's chore menu)."""
    return [
        span
        for span in user_spans(step)
        if span.field.startswith("messages[") and _role_of(step, span.field) == "user"
    ]


def _role_of(step: Step, field: str) -> str:
    index = int(field[len("messages[") : -1])
    return step.messages[index].role


@register()
class HarmfulRequest(HeadChecker):
    """The user's request reads as a request for harm (weapons, fraud, intrusion,
    harassment …) and the agent went along (a consequential call or a long reply, no
    refusal): a warning, never a block. The head is a linear probe on the 3-layer MiniLM;
    ordinary compound requests ("send the invoice and delete my old drafts") score 0.8–0.9
    as often as harmful ones, so it only warns; ``heuristic.complied_harmful_request``
    blocks on what makes a request harmful (docs/DECISIONS.md)."""

    name = "model.harmful_request"
    scope = "episode"
    risk_types = (RiskType.HARMFUL_CONTENT,)
    description = "MiniLM head: did the user ask for harm, and did the agent go along? (warns)"
    head_name = "harmful_request"
    min_reply_words = 30

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        return [mandate.split_user_turn(span.text)[0][:2000] for span in user_turns(step)]

    def check(self, step: Step, context: list[Step]) -> list[Finding]:
        if not complies(step, context, self.min_reply_words):
            return []
        requests = [t for s in [*context, step] for t in self.texts(s, context) if t.strip()]
        probs = self.probabilities(requests)
        if not len(probs) or probs.max() < 0.5:
            return []
        best = int(np.argmax(probs))
        return [
            Finding(
                RiskType.HARMFUL_CONTENT,
                float(probs[best]),
                Severity.MEDIUM,
                f"the agent went along with what reads as a request for harm (p={probs[best]:.2f})",
                (
                    Evidence(text=requests[best][:500], field="user_turn"),
                    Evidence(text=action_text(step)[:500], field="action"),
                ),
            )
        ]


@register()
class ToxicityModel(HeadChecker):
    """Hateful or toxic text in what the agent says or sends."""

    name = "model.toxicity"
    risk_types = (RiskType.HARMFUL_CONTENT,)
    description = "MiniLM head trained on ToxiGen hate vs neutral statements"
    head_name = "toxicity"

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        return [span.text[:2000] for span in self._spans(step)]

    def _spans(self, step: Step) -> list[Span]:
        name = tool_name(step)
        if name and not signals.is_outbound(name):
            return []  # only what reaches people: replies and outbound messages
        return list(action_spans(step))

    def check(self, step: Step, context: list[Step]) -> list[Finding]:
        spans = self._spans(step)
        probs = self.probabilities([s.text[:2000] for s in spans])
        out = []
        for span, p in zip(spans, probs, strict=True):
            if p >= 0.5:
                severity = Severity.HIGH if p >= 0.9 else Severity.MEDIUM
                out.append(
                    Finding(
                        RiskType.HARMFUL_CONTENT,
                        float(p),
                        severity,
                        f"{span.field} reads as toxic (p={p:.2f})",
                        (Evidence(text=span.text[:500], field=span.field),),
                    )
                )
        return out


RESULT_CHARS = 100
TRAJECTORY_DIM = 5 * DIM


def step_pieces(step: Step) -> tuple[list[str], list[str], list[str]]:
    """What one step adds to its trajectory's features: the user's turns, the agent's actions
    and what came back, each as the very text another head reads where one does (jailbreak,
    toxicity, instruction-in-data). Each piece is embedded once, when its step arrives."""
    return (
        [span.text[:2000] for span in user_turns(step)],
        [span.text[:2000] for span in action_spans(step)],
        [result_piece(span.text) for span in incoming_spans(step)],
    )


def result_piece(text: str) -> str:
    """What the trajectory head reads of an incoming text: its chunk that addresses the
    reader most (the one the instruction head reads first), else its start."""
    addressed = [chunk for chunk in signals.chunks(text) if signals.addresses_reader(chunk)]
    return max(addressed, key=signals.reader_cues) if addressed else text[:RESULT_CHARS]


def trajectory_features(embedder: MiniLM, steps: Sequence[Step]) -> np.ndarray:
    """The trajectory head's input, pooled from per-step pieces so that a new step costs only
    its own embeddings: mean of the task turns, mean and max of the actions, the latest
    step's actions, mean of the results (each 384 wide, zeros when there are none)."""
    pieces = [step_pieces(step) for step in steps]
    texts = list(dict.fromkeys(t for group in pieces for kind in group for t in kind))
    vectors = dict(zip(texts, embedder.embed(texts), strict=True)) if texts else {}

    def stacked(kind: int, chosen: Sequence[tuple[list[str], ...]]) -> np.ndarray:
        rows = [vectors[t] for group in chosen for t in group[kind]]
        return np.stack(rows) if rows else np.zeros((1, DIM), dtype=np.float32)

    actions = stacked(1, pieces)
    return np.concatenate(
        [
            stacked(0, pieces).mean(axis=0),
            actions.mean(axis=0),
            actions.max(axis=0),
            stacked(1, pieces[-1:]).mean(axis=0),
            stacked(2, pieces).mean(axis=0),
        ]
    ).astype(np.float32)


def trajectory_text(steps: Sequence[Step], budget: int = 1400) -> str:
    """The text the trajectory head reads: the task, then the agent's actions (latest kept
    when long), each with the start of what came back."""
    if not steps:
        return ""
    task = task_text(steps[-1], list(steps[:-1]))[-400:]
    lines = []
    for step in steps:
        name = tool_name(step)
        if name:
            lines.append(f"Action: {name} {tool_arguments(step)[:160]}")
            if step.tool_result:
                lines.append(f"Result: {step.tool_result[:100]}")
        else:
            lines.append(f"Reply: {final_reply(step)[:200]}")
    body = "\n".join(lines)
    if len(body) > budget - len(task):
        body = body[-(budget - len(task)) :]
    return f"Task: {task}\n{body}"


@register(enabled_by_default=False)
class TrajectoryRisk(HeadChecker):
    """Whole-trajectory judgement: does the agent's behaviour so far look unsafe? A doubt
    about a trajectory that only did what the user asked (:func:`user_mandated`) is a
    warning; a confident finding blocks whatever the mandate.

    Off by default: trained on R-Judge and AgentDojo only, it blocked 102 of 150 safe
    OpenAgentSafety runs and 21 of 150 safe ToolEmu runs, sources it never saw (a sample of
    each, see docs/BENCHMARKS.md); choose it with ``--checkers`` where your agents resemble
    those two sources."""

    name = "model.trajectory_risk"
    scope = "episode"
    risk_types = (RiskType.UNSAFE_BEHAVIOUR,)
    description = "MiniLM head on task + actions so far, trained on labelled agent trajectories"
    head_name = "trajectory_risk"
    confident = 0.9
    """Probability from which the user's mandate no longer downgrades a finding."""

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        """This step's pieces (earlier steps' were embedded when they arrived)."""
        return [t for kind in step_pieces(step) for t in kind]

    def check(self, step: Step, context: list[Step]) -> list[Finding]:
        name = tool_name(step)
        if name and signals.is_read_only(name):
            # judged at the next consequential action or reply; embed this step's pieces now
            # so that step pays only for its own
            self.embedder.embed(self.texts(step, context))
            return []
        features = trajectory_features(self.embedder, [*context, step])
        p = float(self.head.predict(features[None, :])[0])
        if p < 0.5:
            return []
        text = trajectory_text([*context, step])
        excused = p < self.confident and user_mandated(step, context)
        return [
            Finding(
                RiskType.UNSAFE_BEHAVIOUR,
                p,
                Severity.MEDIUM if excused else Severity.HIGH,
                f"trajectory so far reads as unsafe (p={p:.2f})",
                (Evidence(text=text[-500:], field="trajectory"),),
            )
        ]


_POSITIVE = {"1", "toxic", "hate", "hateful", "offensive", "abusive", "harmful", "true", "yes"}
_NEGATIVE = {"0", "neutral", "benign", "clean", "non-toxic", "nontoxic", "safe", "false", "no"}


@register()
class LabelFlip(HeadChecker):
    """Data poisoning: labelled records the agent writes whose toxicity labels disagree with
    what the text says, in a share no honest labeller would reach."""

    name = "model.label_flip"
    risk_types = (RiskType.DATA_POISONING,)
    description = "records written with toxic/neutral labels that the toxicity head contradicts"
    head_name = "toxicity"
    min_records = 4
    max_disagreement = 0.3
    margin = 0.1
    """A record counts only when the head's probability is this far from 0.5."""

    def texts(self, step: Step, context: list[Step]) -> list[str]:
        return [t for t, _ in self._pairs(step)]

    def _pairs(self, step: Step) -> list[tuple[str, str]]:
        pairs = [(t, lab) for t, lab in labelled_records(step) if lab in _POSITIVE | _NEGATIVE]
        return pairs if len(pairs) >= self.min_records else []

    def check(self, step: Step, context: list[Step]) -> list[Finding]:
        pairs = self._pairs(step)
        if not pairs:
            return []
        probs = self.probabilities([t for t, _ in pairs])
        confident = [
            (t, lab, p)
            for (t, lab), p in zip(pairs, probs, strict=True)
            if abs(p - 0.5) >= self.margin
        ]
        if len(confident) < self.min_records:
            return []
        flipped = [(t, lab) for t, lab, p in confident if (p >= 0.5) != (lab in _POSITIVE)]
        share = len(flipped) / len(confident)
        if share <= self.max_disagreement:
            return []
        return [
            Finding(
                RiskType.DATA_POISONING,
                min(1.0, 0.5 + share / 2),
                Severity.HIGH,
                f"{len(flipped)} of {len(confident)} confidently-judged records carry "
                "the opposite label",
                tuple(Evidence(text=f"{lab}: {t[:200]}", field="action") for t, lab in flipped[:3]),
            )
        ]
