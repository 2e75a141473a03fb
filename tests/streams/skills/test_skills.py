"""Skills distilled from confirmed unsafe acts, paired with the safe act, deduplicated,
retrieved by task."""

from __future__ import annotations

import pytest
from data_episodes import episode_events

from safactory.agents.skills import render_for_prompt
from safactory.infra.embedding import MiniLM
from safactory.schemas import ChatMessage, Decision, EpisodeEnded, Outcome, Trajectory, Verdict
from safactory.streams.assembly import TrajectoryAssembler
from safactory.streams.skills import SkillLibrary, distil_lessons


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


def _assembled(n_episodes: int) -> tuple[list[Trajectory], list[Verdict]]:
    events = [e for n in range(n_episodes) for e in episode_events(n, steps=3)]
    events = [
        e.model_copy(update={"outcome": Outcome.FAILURE, "task_reward": 0.0})
        if isinstance(e, EpisodeEnded) and e.episode_id == "ep-1"
        else e
        for e in events
    ]
    assembler = TrajectoryAssembler()
    out = [t for e in events for t in assembler.apply(e, 1.0) if isinstance(t, Trajectory)]
    return out, [e for e in events if isinstance(e, Verdict)]


def test_lessons_come_only_from_confirmed_unsafe_acts_and_duplicates_merge(
    minilm: MiniLM,
) -> None:
    trajectories, verdicts = _assembled(7)  # episodes 0, 3, 6 unsafe; episode 1 failed
    library = SkillLibrary(minilm)
    published = []
    for t in trajectories:
        lessons = distil_lessons(t, [v for v in verdicts if v.episode_id == t.episode_id])
        if t.episode_id in ("ep-1", "ep-2", "ep-4", "ep-5"):
            assert lessons == []  # safe (a failure teaches no safety lesson)
        else:
            (lesson,) = lessons
            assert lesson.risk_types == ["prompt_injection"]
            assert f"act {t.episode_id[3:]}.2" not in lesson.lesson  # never the unsafe act
            assert "an earlier attempt did harm (prompt injection)" in lesson.lesson
            assert lesson.title == "Ask before acting"  # no safe sibling to name
        published += library.add(lessons)
    sources = sorted(e for s in library.skills for e in s.source_episode_ids)
    assert sources == ["ep-0", "ep-3", "ep-6"]
    assert len({p.event_id for p in published}) == len(published)
    first = trajectories[0]
    again = first.model_copy(update={"episode_id": "ep-again", "event_id": "t-again"})
    mine = [v for v in verdicts if v.episode_id == first.episode_id]
    before = len(library.skills)
    (merged,) = library.add(distil_lessons(again, mine))  # the same lesson again
    assert len(library.skills) == before and merged.source_episode_ids[-1] == "ep-again"


def test_a_warning_or_an_uncertain_finding_teaches_nothing(minilm: MiniLM) -> None:
    trajectories, verdicts = _assembled(1)  # episode 0: its last step blocked
    (t,) = trajectories
    unconfirmed = t.model_copy(update={"safety": None})
    for decision in (Decision.WARN, Decision.UNCERTAIN):
        softened = [v.model_copy(update={"decision": decision}) for v in verdicts]
        assert distil_lessons(unconfirmed, softened) == []
    assert distil_lessons(unconfirmed, verdicts)  # a block with evidence confirms


def test_a_lesson_names_the_safe_act_a_sibling_took_from_the_same_step(minilm: MiniLM) -> None:
    trajectories, verdicts = _assembled(1)
    (t,) = trajectories
    (lesson,) = distil_lessons(t, verdicts, siblings=[{2: "read the report first"}])
    assert "do `read the report first`: it did the job safely" in lesson.lesson
    assert lesson.title == "Do read the report first" and "act 0.2" not in lesson.lesson
    (alone,) = distil_lessons(t, verdicts)
    assert "or ask the user first" in alone.lesson  # no sibling, no menu: ask
    menu = ["rm -rf /*", "deployctl unlock --stale"]
    offered = t.model_copy(
        update={"steps": [s.model_copy(update={"choices": menu}) for s in t.steps]}
    )
    (unjudged,) = distil_lessons(offered, verdicts)
    assert "rm -rf /*" not in unjudged.lesson  # a menu entry nobody saw come out safe
    assert "or ask the user first" in unjudged.lesson
    asked = "Deploys are blocked by a stale lock.\n1. rm -rf /*\n2. deployctl unlock --stale"
    prompted = offered.model_copy(update={"prompt": [ChatMessage(role="user", content=asked)]})
    (lesson,) = distil_lessons(prompted, verdicts)
    assert lesson.applies_when == "Deploys are blocked by a stale lock."  # not its numbering


def test_the_environments_ground_truth_alone_confirms(minilm: MiniLM) -> None:
    trajectories, _ = _assembled(1)
    (t,) = trajectories  # unsafe by the environment, no verdict at all
    (lesson,) = distil_lessons(t, [])
    assert lesson.title == "Ask before acting" and "act 0.2" not in lesson.lesson
    assert "an earlier attempt did harm" in lesson.lesson


def test_top_k_retrieval_for_experience_injection(minilm: MiniLM) -> None:
    trajectories, verdicts = _assembled(4)
    library = SkillLibrary(minilm)
    for t in trajectories:
        library.add(distil_lessons(t, [v for v in verdicts if v.episode_id == t.episode_id]))
    (top,) = library.top_k("task 3", k=1, env="bank")  # the request of unsafe episode 3
    assert top.risk_types == ["prompt_injection"] and "ep-3" in top.source_episode_ids
    shown = library.top_k("task 0", k=2, env="bank")
    block = render_for_prompt(shown)
    assert block.startswith("Lessons from earlier episodes:")
    assert block.count("\n- ") == len(shown) >= 1
    # a lesson about something else is not injected: it would only add its unsafe act
    assert library.top_k("Bake a loaf of sourdough bread for the weekend.", k=3) == []
