"""The fault campaign, short: real workers SIGKILLed and SIGSTOPped mid-flow and a broker
killed, then every record counted against the topics' end offsets (bench/chaos.py does the
work).

It runs on a broker of its own (other ports, its own data), so it neither needs nor
disturbs the shared one. About 3 minutes on 2 cores; the full campaign's figures are in
docs/RELIABILITY.md. Every worker kind is killed once: audit, assemble, sink, score, skills
and simulate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from loopback_ports import free_ports

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "chaos.py"
WORKERS = {"audit", "assemble", "sink", "score", "skills", "simulate"}


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run the short campaign once; its figures as the JSON the bench wrote."""
    work = tmp_path_factory.mktemp("chaos")
    out = work / "figures.json"
    cmd = [
        sys.executable,
        str(BENCH),
        "--steps",
        "3000",
        "--kills",
        "6",
        "--stalls",
        "6",
        "--stall-s",
        "20",
        "--broker-kill",
        "--rate",
        "100",
        "--episode-timeout",
        "20",
        "--verdict-timeout",
        "20",
        "--drain-timeout",
        "100",
        "--warmup",
        "15",
        "--port",
        str(free_ports(2)),
        "--workdir",
        str(work / "run"),
        "--out",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420, check=False)
    print(proc.stdout[-6000:])
    assert out.exists(), (
        f"the campaign wrote no figures:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    return json.loads(out.read_text())


def test_every_worker_and_the_broker_were_killed_mid_flow(campaign: dict) -> None:
    kinds = Counter(f["kind"] for f in campaign["faults"])
    assert kinds["sigkill"] >= len(WORKERS) and kinds["broker_kill"] == 1, campaign["faults"]
    assert {f["target"] for f in campaign["faults"] if f["kind"] == "sigkill"} == WORKERS
    assert all(0 < f["progress"] < 1 for f in campaign["faults"])
    assert campaign["steps"]["distinct"] >= 2500


def test_every_worker_rode_out_a_stall_past_its_session(campaign: dict) -> None:
    """SIGSTOP for 20 s (twice the group session timeout), then SIGCONT: each worker was
    expelled from its group meanwhile, and none exited by itself afterwards."""
    stalls = [f for f in campaign["faults"] if f["kind"] == "sigstop"]
    assert {f["target"] for f in stalls} == WORKERS, campaign["faults"]
    assert all(f["back_after_s"] is not None for f in stalls)
    assert campaign["unexpected_exits"] == [], campaign["unexpected_exits"]


def test_the_pipeline_drained_and_stopped_with_every_offset_committed(campaign: dict) -> None:
    drain = campaign["drain"]
    assert drain["drained"], drain
    assert campaign["killed_on_stop"] == []
    assert sum(drain["lag_after_stop"]["total"].values()) == 0, drain["lag_after_stop"]


def test_no_row_lost_or_duplicated_in_any_table(campaign: dict) -> None:
    assert campaign["steps"]["acked_but_missing"] == 0
    for name, table in campaign["tables"].items():
        assert (name, table["lost"], table["duplicated"]) == (name, 0, 0), table


def test_every_step_is_in_a_trajectory(campaign: dict) -> None:
    steps = campaign["steps"]
    assert steps["in_no_trajectory"] == 0, steps["orphan_examples"]
    assert steps["in_no_stored_trajectory"] == 0
    assert campaign["trajectories"]["incomplete"] == 0, campaign["trajectories"]


def test_every_trajectory_is_scored_and_every_lesson_taught(campaign: dict) -> None:
    """The score and skills workers, SIGKILLed like the others, lose nothing: every
    trajectory has a score, every one with a lesson to teach is a source of some skill."""
    assert campaign["scores"]["trajectories_never_scored"] == 0
    assert campaign["skills"]["distillable"] > 0
    assert campaign["skills"]["in_no_skill"] == 0, campaign["skills"]["examples"]


def test_steps_of_an_episode_stay_in_order(campaign: dict) -> None:
    assert campaign["steps"]["episodes_out_of_order"] == 0
