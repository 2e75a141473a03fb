"""A DataElf job cannot hurt the host: memory, CPU time and output size are limited, each
ending the job with one line naming the limit and its flag; nothing but plain files leaves
the run folder (a symlink the job planted is never followed); a relative ``--out`` is the
caller's folder; names and values a plan may not hold are refused when it is read."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from data_episodes import episode_events
from deliveries import deliveries
from plugins import install_plugin
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.sinks.dataelf.limits import Limits
from safactory.sinks.dataelf.operators import PlanError
from safactory.sinks.dataelf.plan import Plan, load_plan
from safactory.sinks.dataelf.private import run_sandboxed
from safactory.sinks.lance import LanceSink
from safactory.streams.audit.mask import mask_text
from safactory.tools.dataelf_job import JOB

if shutil.which("bwrap") is None:  # pragma: no cover - CI installs bubblewrap
    pytest.skip("sandboxed runs need bubblewrap", allow_module_level=True)

PLUGIN = """
import os, time
from typing import ClassVar, Literal
from safactory.sinks.dataelf.operators import Operator

class Spin(Operator):
    NAME: ClassVar[str] = "spin"
    op: Literal["spin"] = "spin"

    def apply(self, table, ctx):
        while True:
            pass

class SpinInC(Operator):
    NAME: ClassVar[str] = "spinc"
    op: Literal["spinc"] = "spinc"

    def apply(self, table, ctx):
        sum(range(1 << 62))  # never back in Python to hear SIGXCPU: killed at the hard limit

class Bulk(Operator):
    NAME: ClassVar[str] = "bulk"
    op: Literal["bulk"] = "bulk"

    def apply(self, table, ctx):
        (ctx.out / "big.csv").write_bytes(b"x" * (3 << 20))
        return table

class Relink(Operator):
    NAME: ClassVar[str] = "relink"
    op: Literal["relink"] = "relink"
    target: str

    def apply(self, table, ctx):
        os.remove(ctx.out / "rows.csv")
        os.symlink(self.target, ctx.out / "rows.csv")
        return table
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    events = [e for n in range(40) for e in episode_events(n, env="os", steps=10)]
    path = tmp_path_factory.mktemp("lance") / "db"
    LanceSink(path).write_batch(deliveries(events))
    return path


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = {"spin": "Spin", "spinc": "SpinInC", "bulk": "Bulk", "relink": "Relink"}
    entries = {name: f"sf_hostile_ops:{cls}" for name, cls in names.items()}
    install_plugin(tmp_path, monkeypatch, "sf_hostile_ops", PLUGIN, "safactory.operators", entries)


def _plan(*steps: dict) -> Plan:
    return Plan.model_validate({"steps": [{"op": "select", "table": "steps"}, *steps]})


def test_a_plan_that_would_take_the_machine_ends_at_its_memory_limit(
    db: Path, tmp_path: Path
) -> None:
    # 400 steps joined with themselves on env, twice: 64 million rows of text
    plan = _plan(
        {"op": "join", "table": "steps", "left_on": "env", "right_on": "env", "columns": ["text"]},
        {
            "op": "join",
            "table": "steps",
            "left_on": "env",
            "right_on": "env",
            "columns": ["task_id"],
        },
        {"op": "aggregate", "by": ["env"]},
    )
    limits = Limits(memory_mb=1024)
    with pytest.raises(PlanError) as failed:
        run_sandboxed(plan, db, tmp_path / "out", job=JOB, limits=limits)
    said = str(failed.value)
    assert "memory limit of 1024 MiB; raise it with --memory-limit" in said
    assert "\n" not in said and list((tmp_path / "out").iterdir()) == []


def test_cpu_time_and_output_size_are_limited(db: Path, tmp_path: Path, plugin: None) -> None:
    with pytest.raises(PlanError, match=r"CPU time limit of 2 s; raise it with --cpu-limit"):
        run_sandboxed(_plan({"op": "spin"}), db, tmp_path / "a", job=JOB, limits=Limits(cpu_s=2))
    with pytest.raises(PlanError, match=r"CPU time limit of 2 s; raise it with --cpu-limit"):
        run_sandboxed(_plan({"op": "spinc"}), db, tmp_path / "c", job=JOB, limits=Limits(cpu_s=2))
    with pytest.raises(PlanError, match=r"output limit of 1 MiB; raise it with --output-limit"):
        run_sandboxed(
            _plan({"op": "bulk"}), db, tmp_path / "b", job=JOB, limits=Limits(output_mb=1)
        )


def test_a_symlink_the_job_leaves_is_never_followed(db: Path, tmp_path: Path, plugin: None) -> None:
    victim = tmp_path / "victim.csv"
    victim.write_text("host data\n")
    plan = _plan(
        {"op": "export", "format": "csv", "name": "rows.csv"},
        {"op": "relink", "target": str(victim)},
        {"op": "export", "format": "csv", "name": "tail.csv"},
    )
    with pytest.raises(PlanError, match=r"left rows.csv, a symlink; the run is discarded"):
        run_sandboxed(plan, db, tmp_path / "out", job=JOB, mask=mask_text)
    assert victim.read_text() == "host data\n"  # masking did not write through the link
    assert list((tmp_path / "out").iterdir()) == []


def test_a_relative_out_is_the_callers_folder(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "steps": [
                    {"op": "select", "table": "steps"},
                    {"op": "aggregate", "by": ["env"]},
                    {"op": "plot", "x": "env", "name": "envs.png"},
                    {"op": "export", "format": "csv", "name": "envs.csv"},
                ]
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    for flags in ([], ["--private"]):
        out = f"runs/q{len(flags)}"
        args = ["data", "ask", "--plan", str(plan), "--db", str(db), "--out", out, "--yes"]
        result = CliRunner().invoke(app, [*args, *flags])
        assert result.exit_code == 0, result.output
        made = sorted(p.name for p in (tmp_path / out).iterdir())
        assert made == ["envs.csv", "envs.png", "manifest.json", "plan.json"]
    assert not os.path.exists("/tmp/runs/q0/envs.csv")  # nothing went to the job's own /tmp


@pytest.mark.parametrize(
    ("step", "named"),
    [
        ({"op": "export", "format": "csv", "name": ".."}, "steps[1] (export).name"),
        ({"op": "export", "format": "csv", "name": "plan.json"}, "steps[1] (export).name"),
        ({"op": "plot", "x": "env", "name": "manifest.json.png"}, None),
        ({"op": "top", "column": "reward", "k": 10**30}, "steps[1] (top).k"),
        ({"op": "where", "column": "reward", "min": float("nan")}, "steps[1] (where).min"),
    ],
)
def test_names_and_values_a_plan_may_not_hold_are_refused_naming_the_field(
    tmp_path: Path, step: dict, named: str | None
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"steps": [{"op": "select", "table": "steps"}, step]}))
    if named is None:
        load_plan(path)  # an ordinary name that merely contains one
        return
    with pytest.raises(PlanError, match=re.escape(f"{path}: {named}")):
        load_plan(path)


def test_a_time_of_infinity_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"steps": [{"op": "select", "table": "steps", "since": Infinity}]}')
    with pytest.raises(PlanError, match=r"steps\[0\] \(select\)\.since: .*finite number"):
        load_plan(path)
