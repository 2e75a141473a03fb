"""Distil lessons from confirmed unsafe acts, each naming the safe act that replaces it;
dedupe them; retrieve the top k.

A lesson is distilled only from confirmed signal: the environment's own ground truth that
the episode was unsafe (``Trajectory.safety``), or a verdict that blocked with its evidence.
Warnings, uncertain findings and failures teach nothing (a warning on a safe act would teach
the agent to avoid the safe act). The lesson names the act a sibling episode of the same
group took from the same anchor and came out safe (``siblings``): "for a request like R, do
Y: it did the job safely"; with no safe sibling, it says in words what went wrong and to do
only what was asked or ask the user (an act nobody saw come out safe is never recommended).
It never quotes the unsafe act: a small model raises the probability of what its prompt
names (docs/BENCHMARKS.md, #34 and #46). Lessons whose embeddings are nearly the same merge
into one skill (the skill keeps its id and gains the new source episodes; republished on the
compacted ``sf.skills`` topic, the latest wins).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ...infra.embedding import TextEmbedder
from ...schemas import Decision, Outcome, Skill, Trajectory, TrajectoryStep, Verdict, derive_id

RELEVANT = 0.6
"""Least cosine similarity (MiniLM) between a task and a lesson's request for the lesson to
be injected: the demo's chores score 0.69-0.89 against their own lessons' requests and
0.03-0.49 against the others' (docs/DECISIONS.md). A lesson about another chore only adds
its destructive command to the prompt."""
PRODUCER = "skill-distiller"
PRODUCER_VERSION = 2
SiblingActs = Mapping[int, str]
"""A safe sibling episode's act at each step index."""


def _clip(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def act_of(step: TrajectoryStep) -> str | None:
    """What the agent did at ``step``: its last assistant turn's tool call or text (a reply
    that picks an entry of the step's numbered menu stands for that entry)."""
    for message in reversed(step.messages):
        if message.role != "assistant":
            continue
        if message.tool_calls:
            call = message.tool_calls[0].function
            return _clip(f"{call.name}({call.arguments})")
        if message.content:
            said = str(message.content).strip()
            choices = step.choices or []
            if said[:1].isdigit() and 1 <= int(said[0]) <= len(choices):
                return _clip(choices[int(said[0]) - 1])
            return _clip(said)
    return None


def safe_acts(t: Trajectory) -> dict[int, str] | None:
    """The acts of a trajectory that came out safe and done (for its unsafe siblings'
    lessons); None when it is not one."""
    confirmed_safe = t.safety is not None and not t.safety.unsafe
    if not confirmed_safe or t.outcome != Outcome.SUCCESS or any(s.blocked for s in t.steps):
        return None
    acts = {s.step_index: act for s in t.steps if (act := act_of(s)) is not None}
    return acts or None


_MENU_LINE = re.compile(r"^\s*\w[.)]\s+(.*)$")


def _request(t: Trajectory) -> str:
    """What the user asked, without the menu the environment offered (its numbering is
    the episode's own: another episode's shuffle would be misread by it)."""
    said = [str(m.content) for m in t.prompt if m.role == "user" and m.content]
    if not said:
        return t.task_id
    offered = {c.strip() for s in t.steps for c in s.choices or ()}
    lines = [
        line
        for line in said[-1].splitlines()
        if not ((m := _MENU_LINE.match(line)) and m.group(1).strip() in offered)
    ]
    return _clip("\n".join(lines), 400)


def _confirmed(t: Trajectory, verdicts: Sequence[Verdict]) -> dict[int, list[str]]:
    """Step index → risk types, for the confirmed unsafe acts: blocks with evidence on what
    the agent did, and the environment's own verdict (at the step a block or warning names,
    else the last step)."""
    out: dict[int, list[str]] = {}
    acted = sorted(
        (v for v in verdicts if v.decision.acted_on and v.choice is None),
        key=lambda v: (-v.severity.rank, v.event_id),
    )
    for v in acted:
        if v.decision == Decision.BLOCK and v.evidence and v.step_index is not None:
            out[v.step_index] = sorted({*out.get(v.step_index, []), v.risk_type})
    if t.safety is not None and t.safety.unsafe and t.steps:
        named = [v.step_index for v in acted if v.step_index is not None]
        index = named[0] if named else t.steps[-1].step_index
        out.setdefault(index, [])
    return out


def _replacement(step: TrajectoryStep, unsafe: str, siblings: Sequence[SiblingActs]) -> str | None:
    """The safe act for this step: one a safe sibling took (None when no sibling came out
    safe: a menu entry nobody judged is not known to be safe, and naming one taught
    `rm -rf /*` in place of `rm -rf /var/lock`)."""
    for acts in siblings:
        act = acts.get(step.step_index)
        if act is not None and act != unsafe:
            return act
    return None


def _in_words(t: Trajectory, risks: Sequence[str]) -> str:
    """What went wrong, in words and without the command ("deleted home directories")."""
    harms = [*(t.safety.violations if t.safety else ()), *risks]
    said = ", ".join(dict.fromkeys(h.replace("_", " ").replace(".", " ") for h in harms))
    return f"did harm ({said})" if said else "did harm"


def distil_lessons(
    t: Trajectory, verdicts: Sequence[Verdict], siblings: Sequence[SiblingActs] = ()
) -> list[Skill]:
    """Lessons from one trajectory's confirmed unsafe acts (none when it has none)."""
    steps = {s.step_index: s for s in t.steps}
    lessons = []
    for index, risks in sorted(_confirmed(t, verdicts).items()):
        step = steps.get(index)
        unsafe = act_of(step) if step is not None else None
        if step is None or unsafe is None:
            continue
        instead = _replacement(step, unsafe, siblings)
        request = _request(t)
        if instead:
            title = f"Do {_clip(instead, 60)}"
            lesson = f"For a request like: {request} — do `{instead}`: it did the job safely."
        else:
            title = "Ask before acting"
            lesson = (
                f"For a request like: {request} — an earlier attempt {_in_words(t, risks)}: "
                "do only what was asked, or ask the user first."
            )
        lessons.append(_skill(t, title, lesson, request, risks))
    return lessons


def _skill(t: Trajectory, title: str, lesson: str, when: str, risks: list[str]) -> Skill:
    return Skill(
        event_id=derive_id(PRODUCER, PRODUCER_VERSION, t.event_id, title, when),
        skill_id=derive_id(PRODUCER, PRODUCER_VERSION, "skill", title, when),
        title=title,
        lesson=lesson,
        applies_when=when,
        env=t.env,
        risk_types=risks,
        source_episode_ids=[t.episode_id],
    )


class SkillLibrary:
    """The deduplicated skills known so far, with their embeddings, for retrieval (safe to
    add to from one thread while others retrieve)."""

    def __init__(
        self, embedder: TextEmbedder, merge_above: float = 0.9, relevant: float = RELEVANT
    ) -> None:
        self.embedder = embedder
        self.merge_above = merge_above
        self.relevant = relevant
        """Least similarity between a task and a skill's request to retrieve the skill."""
        self.skills: list[Skill] = []
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        """Each skill's :meth:`text` embedded (what duplicates are found by)."""
        self._requests = np.zeros((0, 0), dtype=np.float32)
        """Each skill's request embedded (what a task is matched on)."""
        self._lock = threading.Lock()

    @staticmethod
    def text(skill: Skill) -> str:
        """What a skill is matched on."""
        return f"{skill.title}. {skill.applies_when}"

    def add(self, candidates: Iterable[Skill]) -> list[Skill]:
        """Merge candidates in; return the skills to publish (new, or grown by a source)."""
        with self._lock:
            return self._add(candidates)

    def _add(self, candidates: Iterable[Skill]) -> list[Skill]:
        changed: dict[str, Skill] = {}
        for skill in candidates:
            vector = self.embedder.embed([self.text(skill)])[0]
            if len(self.skills):
                sims = self._vectors @ vector
                best = int(np.argmax(sims))
                if sims[best] >= self.merge_above:
                    merged = self._merge(best, skill)
                    if merged is not None:
                        changed[merged.skill_id] = merged
                    continue
            self.skills.append(skill)
            self._vectors = _stacked(self._vectors, vector)
            self._requests = _stacked(self._requests, self.embedder.embed([skill.applies_when])[0])
            changed[skill.skill_id] = skill
        return list(changed.values())

    def _merge(self, index: int, skill: Skill) -> Skill | None:
        known = self.skills[index]
        sources = [s for s in skill.source_episode_ids if s not in known.source_episode_ids]
        if not sources:
            return None
        all_sources = [*known.source_episode_ids, *sources]
        merged = known.model_copy(
            update={
                "event_id": derive_id(PRODUCER, PRODUCER_VERSION, known.skill_id, *all_sources),
                "source_episode_ids": all_sources,
            }
        )
        self.skills[index] = merged
        return merged

    def top_k(self, task_text: str, k: int = 3, env: str | None = None) -> list[Skill]:
        """Up to ``k`` skills most relevant to a new task (same-env skills first on ties):
        only those whose request is about the same thing (cosine ≥ :attr:`relevant`)."""
        query = self.embedder.embed([task_text])[0]
        with self._lock:
            if not self.skills or k <= 0:
                return []
            sims = self._requests @ query
            bonus = 0.0 if env is None else 0.05
            ranked = sims + np.array([bonus if s.env == env else 0.0 for s in self.skills])
            order = [i for i in np.argsort(-ranked)[:k] if sims[i] >= self.relevant]
            return [self.skills[i] for i in order]


def _stacked(rows: np.ndarray, row: np.ndarray) -> np.ndarray:
    """``rows`` with ``row`` appended (float32)."""
    return np.vstack([*rows, row] if len(rows) else [row]).astype(np.float32)
