"""The closed loop's parts that need no broker: options over a profile's defaults, the
workers' environment, a round's line, and summary.json's layout (its keys, in order)."""

from __future__ import annotations

import json
from pathlib import Path

from example_events import example_events

from safactory.infra.config import Settings
from safactory.streams.evaluation.loop import Loop, child_env, round_line
from safactory.streams.evaluation.observer import Observer
from safactory.streams.evaluation.profiles import PROFILES, DemoOptions
from safactory.streams.evaluation.rounds import RoundResult

KNOBS = {
    "seed": 0,
    "concurrency": 4,
    "stage_timeout": 1.0,
    "verdict_wait": 1.0,
    "embed": False,
    "keep_running": False,
}


def test_options_left_out_take_the_profile_defaults() -> None:
    tiny = PROFILES["tiny"]
    options = DemoOptions.of(tiny, None, 2, None, 0, **KNOBS)
    assert (options.episodes, options.rounds, options.lr) == (tiny.episodes, 2, tiny.lr)
    assert options.skills == 0  # given as 0: no injection round, not the default


def test_the_workers_run_on_the_run_s_topics_home_and_database(tmp_path: Path) -> None:
    env = child_env("demo-x.", tmp_path, tmp_path / "db")
    assert env["SF_TOPIC_PREFIX"] == "demo-x." and env["SF_LANCE_URI"] == str(tmp_path / "db")
    assert env["SF_HOME"] == str(tmp_path / "home") and env["HF_HUB_OFFLINE"] == "1"


def test_a_round_line_says_versions_safety_reward_and_time() -> None:
    r = RoundResult(3, "train", 8, {2: 8}, 2, 5, 0.25, {"destructive_operation": 3}, {})
    r.seconds, r.update_seconds = 12.4, 3.6
    assert round_line(r) == (
        "round 3 (train, v2×8): 8 episodes, unsafe 2 (25%), done safely 5, "
        "mean reward +0.25, alerts 3; 12 s + update 4 s"
    )


async def test_the_summary_keeps_its_keys_and_their_order(tmp_path: Path) -> None:
    options = DemoOptions.of(PROFILES["tiny"], 4, 1, None, None, **KNOBS)
    loop = Loop(
        Settings(topic_prefix="demo-x."),
        "demo-x",
        tmp_path,
        options,
        [],
        rows=lambda db, table: 0,
        counts=lambda db, tables: {},
        say=print,
    )
    loop.observer = Observer(loop.settings)  # never started: its tally is filled here
    events = {type(e).__name__: e for e in example_events()}
    loop.tally.ended = {"ep-1": events["EpisodeEnded"]}
    before = RoundResult.of(0, "before", loop.tally.evaluate({events["EpisodeEnded"].task_id}))
    loop.results = [before, RoundResult.of(1, "after", loop.tally.evaluate(set()))]
    loop.stored = {"trajectories": {"rows": 1, "distinct": 1}}
    picture = loop.record()
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert loop.stop(started=0.0) == []
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert list(summary) == [
        "run",
        "topic_prefix",
        "workdir",
        "rounds",
        "before",
        "injection",
        "skills",
        "after",
        "episodes",
        "steps",
        "verdicts",
        "alerts_by_risk",
        "alerted_episodes",
        "unsafe_episodes",
        "trajectories",
        "trajectories_with_verdicts",
        "trajectory_records",
        "policy_versions",
        "versions_run",
        "lancedb",
        "logs",
        "commands",
        "learning_png",
        "seconds",
        "stages",
        "killed_on_stop",
    ]
    assert "stopping the workers" in summary["stages"]  # where the run's time went
    assert summary["run"] == "demo-x" and summary["learning_png"] == str(picture)
    assert summary["rounds"][0]["kind"] == "before" and summary["episodes"] == 1
