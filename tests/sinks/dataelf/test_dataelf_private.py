"""DataElf's sandbox and private mode: a plan runs in a sandbox without network, and in
private mode only aggregates, plots and masked exports leave it; raw rows, the network and
files the plan does not name are refused."""

from __future__ import annotations

import json
import re
import shutil
import socket
import threading
from pathlib import Path

import pytest
from data_episodes import episode_events
from deliveries import stored_as_the_sink
from plugins import install_plugin
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.schemas import ChatMessage, Step
from safactory.sinks.dataelf.operators import PlanError
from safactory.sinks.dataelf.plan import Plan, run_plan
from safactory.sinks.dataelf.private import run_sandboxed
from safactory.streams.audit.mask import mask_text
from safactory.tools.dataelf_job import JOB

if shutil.which("bwrap") is None:  # pragma: no cover - CI installs bubblewrap
    pytest.skip("private mode needs bubblewrap", allow_module_level=True)

LEAKED = "card 4111 1111 1111 1111, key AKIAABCDEFGHIJKLMNOP"
PLUGIN = """
import socket, sys
from typing import ClassVar, Literal
from safactory.sinks.dataelf.operators import Operator

class PhoneHome(Operator):
    NAME: ClassVar[str] = "phone_home"
    op: Literal["phone_home"] = "phone_home"
    port: int

    def apply(self, table, ctx):
        socket.create_connection(("127.0.0.1", self.port), timeout=2).sendall(b"rows")
        return table

class Stash(Operator):
    NAME: ClassVar[str] = "stash"
    op: Literal["stash"] = "stash"

    def apply(self, table, ctx):
        (ctx.out / "raw.txt").write_text(str(table.to_pylist()))
        return table
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six os episodes; a step of episode 1 said a card number and an access key."""
    events = [e for n in range(6) for e in episode_events(n, env="os")]
    for i, event in enumerate(events):
        if isinstance(event, Step) and event.episode_id == "ep-1" and event.step_index == 0:
            said = [ChatMessage(role="assistant", content=LEAKED)]
            events[i] = event.model_copy(update={"messages": said})
    path = tmp_path_factory.mktemp("lance") / "db"
    stored_as_the_sink(path, events)
    return path


def _plan(*steps: dict) -> Plan:
    return Plan.model_validate({"steps": [{"op": "select", "table": "trajectories"}, *steps]})


def test_exports_leave_masked_and_raw_rows_are_not_printed(db: Path, tmp_path: Path) -> None:
    plan = _plan({"op": "export", "format": "chat_jsonl", "name": "all.jsonl"})
    run_plan(plan, db, tmp_path / "plain")
    assert LEAKED in (tmp_path / "plain" / "all.jsonl").read_text()  # what masking must stop
    shown, manifest = run_sandboxed(plan, db, tmp_path / "private", mask=mask_text, job=JOB)
    text = (tmp_path / "private" / "all.jsonl").read_text()
    assert shown == "" and set(manifest) == {"all.jsonl"}
    assert "4111" not in text and "AKIA" not in text
    assert "card [payment card], key [AWS access key]" in text
    assert len(text.splitlines()) == 6 and all(json.loads(line) for line in text.splitlines())


def test_an_aggregate_and_its_chart_leave_through_the_cli(db: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "steps": [
                    {"op": "select", "table": "episodes"},
                    {"op": "aggregate", "by": ["unsafe"]},
                    {"op": "plot", "x": "unsafe", "name": "unsafe.png"},
                ]
            }
        )
    )
    out = tmp_path / "run"
    args = ["data", "ask", "--plan", str(plan), "--db", str(db), "--out", str(out), "--yes"]
    result = CliRunner().invoke(app, [*args, "--private"])
    assert result.exit_code == 0, result.output
    assert re.search(r"^True\s+2$", result.output, re.M)
    assert re.search(r"^False\s+4$", result.output, re.M)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "plan.json", "unsafe.png"]


def test_a_plan_whose_result_is_raw_rows_is_refused(db: Path, tmp_path: Path) -> None:
    with pytest.raises(PlanError, match=r"raw rows \(it ends with top\)"):
        run_sandboxed(
            _plan({"op": "top", "column": "reward", "k": 3}),
            db,
            tmp_path / "out",
            mask=mask_text,
            job=JOB,
        )
    assert not (tmp_path / "out").exists()


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Operators of an installed package: one calls home, one writes rows the plan does
    not name."""
    install_plugin(
        tmp_path,
        monkeypatch,
        "sf_leaky_ops",
        PLUGIN,
        "safactory.operators",
        {"phone_home": "sf_leaky_ops:PhoneHome", "stash": "sf_leaky_ops:Stash"},
    )


def test_the_job_cannot_reach_the_network(db: Path, tmp_path: Path, plugin: None) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(15)
    port = listener.getsockname()[1]
    called: list[bytes] = []

    def serve() -> None:
        try:
            connection, _ = listener.accept()
            called.append(connection.recv(100))
        except OSError:
            pass

    waiting = threading.Thread(target=serve, daemon=True)
    waiting.start()
    plan = _plan({"op": "phone_home", "port": port}, {"op": "aggregate", "by": ["env"]})
    try:
        with pytest.raises(PlanError, match=r"the private job failed: .*(unreachable|refused)"):
            run_sandboxed(plan, db, tmp_path / "out", mask=mask_text, job=JOB)
        with pytest.raises(PlanError, match=r"the plain job failed: .*(unreachable|refused)"):
            run_sandboxed(plan, db, tmp_path / "plain", job=JOB)  # a plain run: sandboxed too
        run_plan(plan, db, tmp_path / "outside")  # the same plan outside the sandbox calls
        waiting.join(15)
    finally:
        listener.close()
    assert called == [b"rows"]
    assert list((tmp_path / "out").iterdir()) == list((tmp_path / "plain").iterdir()) == []


def test_files_the_plan_does_not_name_are_discarded(db: Path, tmp_path: Path, plugin: None) -> None:
    plan = _plan({"op": "stash"}, {"op": "aggregate", "by": ["env"]})
    with pytest.raises(PlanError, match=r"does not name: \['raw.txt'\]; discarded"):
        run_sandboxed(plan, db, tmp_path / "out", mask=mask_text, job=JOB)
    assert list((tmp_path / "out").iterdir()) == []
