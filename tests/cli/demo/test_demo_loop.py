"""The main job end to end: ``safactory demo`` on the real broker, every worker a real
subprocess, and the loop closes — discover, keep, repair, verify (with the tiny model: the
SmolLM2 run takes minutes and is measured in docs/DEMO.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from safactory.sinks.query import open_table

EPISODES = 16
ROUNDS = 4


@pytest.mark.integration
def test_demo_closes_the_loop(kafka: str, tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "safactory.cli.main",
            "demo",
            "--model",
            "tiny",
            "--episodes",
            str(EPISODES),
            "--rounds",
            str(ROUNDS),
            "--workdir",
            str(workdir),
            "--timeout",
            "150",
        ],
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((workdir / "summary.json").read_text())
    total = EPISODES * (ROUNDS + 3)

    # discover: every round ran, and every unsafe action the env saw raised an alert
    assert summary["episodes"] == total and summary["steps"] == total
    baseline, injection, verify = summary["rounds"][0], summary["rounds"][1], summary["rounds"][-1]
    kinds = ["before", "injection", *["train"] * ROUNDS, "after"]
    assert [r["kind"] for r in summary["rounds"]] == kinds
    assert [r["episodes"] for r in summary["rounds"]] == [EPISODES] * (ROUNDS + 3)
    assert baseline["unsafe"] > 0, "the untrained policy took no shortcut at this seed"
    assert summary["unsafe_episodes"]
    assert set(summary["unsafe_episodes"]) <= set(summary["alerted_episodes"])
    assert summary["alerts_by_risk"].get("destructive_operation", 0) >= baseline["unsafe"]

    # keep: one trajectory per episode, each stored once in LanceDB, with its verdicts
    assert summary["trajectories"] == summary["trajectory_records"] == total
    assert summary["trajectories_with_verdicts"] == total
    for table, expected in (("trajectories", total), ("steps", total), ("episodes", 2 * total)):
        stored = summary["lancedb"][table]
        assert stored["rows"] == stored["distinct"] == expected, table
        assert open_table(workdir / "lancedb", table).count_rows() == expected
    assert summary["lancedb"]["trajectories_with_destructive_verdict"]["rows"] >= baseline["unsafe"]

    # repair: a new version per training round, each run by the simulation worker; the
    # held-out rounds ran v0 and the final version, and were never trained on
    assert summary["policy_versions"] == list(range(ROUNDS + 1))
    assert summary["versions_run"] == list(range(ROUNDS + 1))
    expected_versions = [0, 0, *range(ROUNDS), ROUNDS]
    for version, result in zip(expected_versions, summary["rounds"], strict=True):
        assert result["versions"] == {str(version): EPISODES}, result
    train_log = Path(summary["logs"]["train"]).read_text()
    assert f"{2 * EPISODES} held out (evaluation tasks" in train_log  # before and injection

    # injection only: the skills worker distilled the before round's alerted episodes, and
    # the injection round ran the same tasks on v0 with one of those skills in each prompt
    assert summary["skills"], "no skill distilled from the before round"
    sources = {e for s in summary["skills"].values() for e in s["source_episode_ids"]}
    assert sources & set(summary["alerted_episodes"])
    assert sum(injection["skills"].values()) == EPISODES  # one skill per episode
    assert set(injection["skills"]) <= set(summary["skills"])
    assert all(not r["skills"] for r in summary["rounds"] if r["kind"] != "injection")
    assert Path(summary["learning_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # verify: the same held-out tasks on the final version are safer and better rewarded
    assert verify["unsafe"] < baseline["unsafe"]
    assert verify["mean_reward"] > baseline["mean_reward"]
    for name in ("audit", "assemble", "sink", "train", "simulate", "skills", "simulate-skills"):
        assert Path(summary["logs"][name]).is_file()
    assert summary["killed_on_stop"] == []
