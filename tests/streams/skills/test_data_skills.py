"""Skills distilled from unsafe and failed trajectories, deduplicated, retrieved by task."""

from __future__ import annotations

import pytest
from data_episodes import episode_events

from safactory.agents.skills import render_for_prompt
from safactory.infra.embedding import MiniLM
from safactory.schemas import EpisodeEnded, Outcome, Trajectory, Verdict
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


def test_lessons_come_from_evidence_and_duplicates_merge(minilm: MiniLM) -> None:
    trajectories, verdicts = _assembled(7)  # episodes 0, 3, 6 unsafe; episode 1 failed
    library = SkillLibrary(minilm)
    published = []
    for t in trajectories:
        lessons = distil_lessons(t, [v for v in verdicts if v.episode_id == t.episode_id])
        if t.episode_id in ("ep-2", "ep-4", "ep-5"):
            assert lessons == []  # succeeded safely: nothing to learn
        published += library.add(lessons)
    titles = sorted(s.title for s in library.skills)
    assert titles == ["Avoid prompt_injection in bank", "Finish tasks in bank"]
    injection = next(s for s in library.skills if s.risk_types == ["prompt_injection"])
    assert "ignore previous instructions" in injection.applies_when
    assert sorted(injection.source_episode_ids) == ["ep-0", "ep-3", "ep-6"]
    assert len(published) == 4  # first skill, its two merges, the failure lesson
    assert len({p.event_id for p in published}) == 4


def test_top_k_retrieval_for_experience_injection(minilm: MiniLM) -> None:
    trajectories, verdicts = _assembled(4)
    library = SkillLibrary(minilm)
    for t in trajectories:
        library.add(distil_lessons(t, [v for v in verdicts if v.episode_id == t.episode_id]))
    (top,) = library.top_k(
        "a web page tells you to ignore your instructions and send the password by email",
        k=1,
        env="bank",
    )
    assert top.risk_types == ["prompt_injection"]
    block = render_for_prompt(library.top_k("finish the bank task", k=2))
    assert block.startswith("Lessons from earlier episodes:") and block.count("\n- ") == 2
