"""Data-value scoring picks planted high-value records over planted duplicates and junk."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from data_episodes import episode_events
from data_tiny_lm import tiny_lm

from safactory.infra.embedding import MiniLM
from safactory.schemas import Trajectory
from safactory.streams.assembly import TrajectoryAssembler
from safactory.streams.scoring.diversity import k_center
from safactory.streams.scoring.heuristics import quality
from safactory.streams.scoring.perplexity import LMScorer
from safactory.streams.scoring.value import (
    Record,
    record_from_trajectory,
    score_event,
    score_records,
    select_diverse,
)


@pytest.fixture(scope="module")
def minilm() -> MiniLM:
    return MiniLM()


def _halueval(shared_data: Path, n: int) -> list[dict]:
    path = shared_data / "audit" / "text" / "halueval" / "qa_one-turn_data.json"
    with path.open() as fh:
        rows = [json.loads(next(fh)) for _ in range(n)]
    return rows


def test_selection_prefers_planted_value_over_duplicates_and_junk(
    shared_data: Path, minilm: MiniLM
) -> None:
    rng = random.Random(7)
    qa = _halueval(shared_data, 40)
    good = [
        Record(
            f"good-{i}",
            f"{r['knowledge']}\nQuestion: {r['question']}",
            f"{r['right_answer']}. According to the context: {r['knowledge'][:200]}",
        )
        for i, r in enumerate(qa[:20])
    ]
    original = good[0]
    dups = [
        Record(
            f"dup-{i}",
            original.instruction,
            original.response if i % 2 else original.response.upper(),
        )
        for i in range(15)
    ]
    junk = [
        Record(f"junk-{i}", r["question"], text)
        for i, (r, text) in enumerate(
            zip(
                qa[20:],
                [
                    "",
                    "ok ok ok ok ok ok ok ok ok ok ok ok ok ok",
                    "asdkj qwpz xcvb mnbv lkjh",
                    "#### $$$$ %%%% ^^^^ &&&&",
                    "lol " * 30,
                ]
                * 3,
                strict=False,
            )
        )
    ]
    unsafe = [
        Record(f"unsafe-{i}", r["question"], r["hallucinated_answer"], safety=0.0)
        for i, r in enumerate(qa[35:40])
    ]
    records = good + dups + junk + unsafe
    rng.shuffle(records)
    model, tokenizer = tiny_lm([r.instruction + r.response for r in records])
    scored, vectors = score_records(records, minilm, LMScorer(model, tokenizer))
    chosen = {s.record.record_id for s in select_diverse(scored, vectors, k=20)}
    good_ids = {r.record_id for r in good}
    copies = {r.record_id for r in dups} | {"good-0"}
    covered = (chosen & good_ids) | ({"good-0"} if chosen & copies else set())
    recall = len(covered) / len(good_ids)  # any one copy of good-0 covers it
    copies_of_original = len(chosen & copies)
    print(
        f"\nselected {len(chosen)} of {len(records)}: planted high-value recall {recall:.2f}, "
        f"copies of the duplicated record {copies_of_original}, junk "
        f"{sum(c.startswith('junk') for c in chosen)}"
    )
    assert recall >= 0.9, (recall, sorted(chosen))
    assert copies_of_original <= 1
    assert not any(c.startswith("junk") for c in chosen)
    by_id = {s.record.record_id: s for s in scored}
    assert all(0 < by_id[g].components["ifd_raw"] for g in good_ids)
    assert by_id["junk-0"].composite == 0.0  # empty response


def test_heuristics_and_k_center_basics() -> None:
    assert quality("") == 0.0
    assert quality("The capital of France is Paris, on the Seine.") > 0.8
    assert quality("zzzz " * 40) < 0.3
    assert quality("qwpz xcvb mnbv lkjh") < quality("a tidy answer with real words")
    points = np.eye(4, dtype=np.float32)
    dup = np.vstack([points, points[:1]])
    chosen = k_center(dup, 4)
    assert sorted(chosen) == [0, 1, 2, 3] or (4 in chosen and 0 not in chosen)


def test_trajectories_become_score_events(minilm: MiniLM) -> None:
    assembler = TrajectoryAssembler()
    events = [e for n in range(4) for e in episode_events(n)]
    trajectories = [t for e in events for t in assembler.apply(e, 1.0) if isinstance(t, Trajectory)]
    verdicts = [e for e in events if e.TOPIC == "verdicts"]
    records = [
        record_from_trajectory(t, [v for v in verdicts if v.episode_id == t.episode_id])
        for t in trajectories
    ]
    assert records[0].safety == 0.25  # episode 0 is unsafe: a HIGH verdict
    assert record_from_trajectory(trajectories[0]).safety == 0.0  # penalty 0.7 + env unsafe 1
    scored, _ = score_records(records, minilm)
    first = score_event(scored[0])
    assert first.event_id == score_event(scored[0]).event_id  # deterministic
    assert first.scores["safety"] == 0.25 and 0 < first.composite <= 1
