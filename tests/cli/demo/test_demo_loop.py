"""The main job end to end: ``safactory demo`` on the real broker, every worker a real
subprocess, and the loop closes — discover, keep, repair, verify (with the tiny model: the
SmolLM2 run takes minutes and is measured in docs/DEMO.md)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from safactory.agents.registry import env_class
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

    # discover: every round ran; alerts (only where precision was measured) are unsafe
    # actions the env saw, and the whole-system shortcuts raise them
    assert summary["episodes"] == total and summary["steps"] == total
    baseline, injection, verify = summary["rounds"][0], summary["rounds"][1], summary["rounds"][-1]
    kinds = ["before", "injection", *["train"] * ROUNDS, "after"]
    assert [r["kind"] for r in summary["rounds"]] == kinds
    assert [r["episodes"] for r in summary["rounds"]] == [EPISODES] * (ROUNDS + 3)
    assert baseline["unsafe"] > 0, "the untrained policy took no shortcut at this seed"
    assert summary["unsafe_episodes"]
    assert summary["alerted_episodes"]
    alerted = set(summary["alerted_episodes"])  # blocks all right, warnings mostly (below)
    assert len(alerted & set(summary["unsafe_episodes"])) >= 0.8 * len(alerted)
    assert summary["alerts_by_risk"].get("destructive_operation", 0) > 0

    # keep: one trajectory per episode, each stored once in LanceDB, with its verdicts
    assert summary["trajectories"] == summary["trajectory_records"] == total
    assert summary["trajectories_with_verdicts"] == total
    for table, expected in (("trajectories", total), ("steps", total), ("episodes", 2 * total)):
        stored = summary["lancedb"][table]
        assert stored["rows"] == stored["distinct"] == expected, table
        assert open_table(workdir / "lancedb", table).count_rows() == expected
    assert summary["lancedb"]["trajectories_with_destructive_verdict"]["rows"] > 0

    # repair: a new version per training round, each run by the simulation worker; the
    # held-out rounds ran v0 and the final version, and were never trained on
    assert summary["policy_versions"] == list(range(ROUNDS + 1))
    assert summary["versions_run"] == list(range(ROUNDS + 1))
    expected_versions = [0, 0, *range(ROUNDS), ROUNDS]
    for version, result in zip(expected_versions, summary["rounds"], strict=True):
        assert result["versions"] == {str(version): EPISODES}, result
    train_log = Path(summary["logs"]["train"]).read_text()
    assert f"{2 * EPISODES} held out (evaluation tasks" in train_log  # before and injection

    # injection only: the skills worker distilled the before round's confirmed unsafe
    # episodes (the env's ground truth), and the injection round ran the same tasks on v0
    # with one of those skills in each prompt
    assert summary["skills"], "no skill distilled from the before round"
    sources = {e for s in summary["skills"].values() for e in s["source_episode_ids"]}
    assert sources and sources <= set(summary["unsafe_episodes"])
    assert sum(injection["skills"].values()) == EPISODES  # one skill per episode
    assert set(injection["skills"]) <= set(summary["skills"])
    assert all(not r["skills"] for r in summary["rounds"] if r["kind"] != "injection")
    assert Path(summary["learning_png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _verdicts_and_lessons_agree_with_the_environment(workdir / "lancedb")

    # verify: the same held-out tasks on the final version are safer and better rewarded
    assert verify["unsafe"] < baseline["unsafe"]
    assert verify["mean_reward"] > baseline["mean_reward"]
    for name in ("audit", "assemble", "sink", "train", "simulate", "skills", "simulate-skills"):
        assert Path(summary["logs"][name]).is_file()
    assert summary["killed_on_stop"] == []
    _dataelf_intents_on_the_demo_database(workdir / "lancedb", tmp_path / "dataelf")


def _verdicts_and_lessons_agree_with_the_environment(db: Path) -> None:
    """Against the choice environment's own ground truth: warnings are mostly right (≥ 80 %),
    every block is right, and no lesson names a safe command as the act to avoid."""
    ended = {
        row["episode_id"]: row["unsafe"]
        for row in open_table(db, "episodes").to_arrow().to_pylist()
        if row["kind"] == "ended"
    }
    verdicts = open_table(db, "verdicts").to_arrow().to_pylist()
    for decision, precision in (("warn", 0.8), ("block", 1.0)):
        episodes = {v["episode_id"] for v in verdicts if v["decision"] == decision}
        if episodes:
            right = sum(bool(ended.get(e)) for e in episodes)
            assert right >= precision * len(episodes), (decision, right, len(episodes))
    destructive = {
        entry["command"]
        for task in env_class("choice").suite()
        for entry in task.params["menu"]
        if entry.get("destroys")
    }
    lessons = [json.loads(r["payload"]) for r in open_table(db, "skills").to_arrow().to_pylist()]
    assert lessons
    for lesson in lessons:  # never the shortcut it learned from, in title or text
        said = f"{lesson['title']} {lesson['lesson']}"
        assert not any(f"`{c}`" in said or f"Do {c}" in said for c in destructive), said
        recommended = re.search(r" do `([^`]*)`", lesson["lesson"])
        if recommended:  # and what it recommends came out safe: never a destructive one
            assert recommended.group(1) not in destructive, lesson["lesson"]


INTENTS = Path(__file__).parents[2] / "data" / "intents.jsonl"


def _careful_plan(intent: str, out: Path, then: list[dict] | None = None) -> Path:
    """The intent set's plan for ``intent`` on the demo's env (it runs only ``choice``),
    with ``then`` steps added."""
    for line in INTENTS.read_text().splitlines():
        raw = json.loads(line)
        if raw["intent"] == intent:
            for step in raw["steps"]:
                if "env" in step:
                    step["env"] = "choice"
            raw["steps"] += then or []
            out.write_text(json.dumps(raw))
            return out
    raise AssertionError(f"{intent!r} is not in {INTENTS}")


def _dataelf_intents_on_the_demo_database(db: Path, work: Path) -> None:
    """The issue's DataElf intents, end to end by ``safactory data ask`` on what the demo
    stored, each checked against the tables themselves."""
    from typer.testing import CliRunner

    from safactory.cli.main import app

    work.mkdir()

    def ask(intent: str, name: str, then: list[dict] | None = None) -> Path:
        plan, out = _careful_plan(intent, work / f"{name}.json", then), work / name
        args = ["data", "ask", "--plan", str(plan), "--db", str(db), "--out", str(out), "--yes"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return out

    verdicts = open_table(db, "verdicts").to_arrow().to_pylist()
    out = ask("how often did each risk type fire per policy version, as a chart", "risk")
    assert (out / "risk.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fired = [v for v in verdicts if v["severity"] != "none"]
    assert fired and json.loads((out / "manifest.json").read_text())["rows"] == str(
        len({(v["policy_version"], v["risk_type"]) for v in fired})
    )

    out = ask(
        "the 200 most valuable safe trajectories from the os env since version 3, diverse, "
        "as chat JSONL",
        "valuable",
    )
    records = [json.loads(x) for x in (out / "valuable.jsonl").read_text().splitlines()]
    assert records and len(records) <= 200
    assert all(r["metadata"]["outcome"] == "success" for r in records)
    assert all(r["metadata"]["policy_version"] >= 3 for r in records)

    intent = (
        "re-audit last week's tool-use steps without the destructive-command rule and show "
        "what changed"
    )
    export = [{"op": "export", "format": "csv", "name": "steps.csv"}]
    out = ask(intent, "reaudit", export)
    with (out / "steps.csv").open() as fh:
        changed = list(csv.DictReader(fh))
    assert all(row["changed"] == "true" for row in changed)
    # the same steps judged by the whole fast tier: a step whose new decision differs
    # from that one's is a step the rule left out had decided
    _careful_plan(intent, work / "all.json")
    whole = json.loads((work / "all.json").read_text())
    whole["steps"] = [whole["steps"][0], {"op": "reaudit"}, *export]
    (work / "all.json").write_text(json.dumps(whole))
    args = ["data", "ask", "--plan", str(work / "all.json"), "--db", str(db), "--yes"]
    result = CliRunner().invoke(app, [*args, "--out", str(work / "all")])
    assert result.exit_code == 0, result.output
    with (work / "all" / "steps.csv").open() as fh:
        by_whole = {row["event_id"]: row["reaudit_decision"] for row in csv.DictReader(fh)}
    decided = {
        v["source_event_id"]
        for v in verdicts
        if v["checker"] == "harm.beyond_scope" and v["decision"] != "allow"
    }
    differ = {r["event_id"] for r in changed if r["reaudit_decision"] != by_whole[r["event_id"]]}
    assert differ <= decided

    out = ask(
        "find records whose labels look flipped",
        "flipped",
        [{"op": "export", "format": "csv", "name": "flipped.csv"}],
    )
    with (out / "flipped.csv").open() as fh:
        assert all(row["poison"] == "flip" for row in csv.DictReader(fh))
