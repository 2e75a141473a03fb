"""Private means private: a table holding one of each kind of secret and personal identifier,
and every output a private DataElf run leaves (csv, parquet, chat and OTel exports, printed
aggregate keys, a chart) is checked for none of them surviving."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from deliveries import deliveries

from safactory.schemas import Action, ChatMessage, EpisodeEnded, Outcome, Step
from safactory.sinks.dataelf.masking import mask_columns
from safactory.sinks.dataelf.plan import Plan, run_plan
from safactory.sinks.dataelf.private import run_sandboxed
from safactory.sinks.lance import LanceSink
from safactory.streams.assembly import TrajectoryAssembler
from safactory.streams.audit.mask import mask_text
from safactory.tools.dataelf_job import JOB

if shutil.which("bwrap") is None:  # pragma: no cover - CI installs bubblewrap
    pytest.skip("private mode needs bubblewrap", allow_module_level=True)

SECRETS = {
    "e-mail address": "jane.doe@example.org",
    "phone number": "+1 415-555-0132",
    "AWS secret key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AWS key id": "AKIAIOSFODNN7EXAMPLE",
    "bearer token": "Bearer eyAbc123DEF456ghi789JKLmno",
    "API key": "sk_live_51HqLyjWDarjtT1zdp7dcXy",
    "password in a URL": "postgres://admin:s3cretPW@db.internal:5432/app",
    "PEM block": (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7qLx\n-----END RSA PRIVATE KEY-----"
    ),
    "IBAN": "GB82 WEST 1234 5698 7654 32",
    "payment card": "4111 1111 1111 1111",
}
SURVIVORS = {
    "e-mail address": "jane.doe",
    "phone number": "555-0132",
    "AWS secret key": "wJalrXUtnFEMI",
    "AWS key id": "AKIAIOSFODNN7",
    "bearer token": "eyAbc123",
    "API key": "sk_live_51Hq",
    "password in a URL": "s3cretPW",
    "PEM block": "MIIEowIBAAKCAQEA",
    "IBAN": "WEST 1234",
    "payment card": "4111",
}
"""A piece of each secret that must not appear in any output."""


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One episode per secret: the agent says it (step text, chat turn, trajectory)."""
    events = []
    for n, (kind, secret) in enumerate(SECRETS.items()):
        said = f"{kind}: {secret}"
        events.append(
            Step(
                episode_id=f"ep-{n}",
                step_index=0,
                env="os",
                task_id=f"t{n}",
                group_id="g",
                policy_version=0,
                action=Action(text=said),
                messages=[
                    ChatMessage(role="user", content="hi"),
                    ChatMessage(role="assistant", content=said),
                ],
            )
        )
        events.append(
            EpisodeEnded(
                episode_id=f"ep-{n}",
                task_id=f"t{n}",
                env="os",
                group_id="g",
                outcome=Outcome.SUCCESS,
                num_steps=1,
            )
        )
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 2000.0)]
    trajectories += assembler.tick(10_000.0)  # no verdicts come: closed by the timeout
    path = tmp_path_factory.mktemp("lance") / "db"
    LanceSink(path).write_batch(deliveries([*events, *trajectories]))
    return path


def _plan(table: str, *steps: dict) -> Plan:
    return Plan.model_validate({"steps": [{"op": "select", "table": table}, *steps]})


def _clean(text: str, where: str) -> None:
    leaked = [kind for kind, piece in SURVIVORS.items() if piece in text]
    assert not leaked, f"{where} leaks {leaked}"


def test_the_masker_masks_every_kind() -> None:
    for kind, secret in SECRETS.items():
        masked = mask_text(f"{kind}: {secret}")
        _clean(masked, kind)
        assert masked.count("[") >= 1, masked
    keep = "event 8f6a6dba4f18a418c0ffee0123456789, 2026-12-02, reward 0.95, internationalization"
    assert mask_text(keep) == keep  # ids, dates, numbers and long words are not secrets


@pytest.mark.parametrize(
    ("table", "fmt"),
    [
        ("steps", "csv"),
        ("steps", "parquet"),
        ("trajectories", "chat_jsonl"),
        ("trajectories", "otel"),
    ],
)
def test_no_private_export_carries_a_secret(db: Path, tmp_path: Path, table: str, fmt: str) -> None:
    plan = _plan(table, {"op": "export", "format": fmt, "name": f"out.{fmt}"})
    run_plan(plan, db, tmp_path / "plain")
    plain = tmp_path / "plain" / f"out.{fmt}"
    raw = pq.read_table(plain).to_pylist() if fmt == "parquet" else plain.read_text()
    assert "s3cretPW" in str(raw)  # what masking must stop
    run_sandboxed(plan, db, tmp_path / "private", mask=mask_text, job=JOB)
    out = tmp_path / "private" / f"out.{fmt}"
    text = str(pq.read_table(out).to_pylist()) if fmt == "parquet" else out.read_text()
    _clean(text, f"a private {fmt} export")


def test_aggregate_keys_and_a_chart_of_raw_text_leave_masked(db: Path, tmp_path: Path) -> None:
    plan = _plan(
        "steps",
        {"op": "aggregate", "by": ["text"]},
        {"op": "plot", "x": "text", "name": "by_text.png"},
    )
    shown, _ = run_sandboxed(plan, db, tmp_path / "private", mask=mask_text, job=JOB)
    _clean(shown, "the printed aggregate")
    assert re.search(r"\[e-mail address\]", shown)
    run_plan(plan, db, tmp_path / "plain")  # the chart with the raw labels
    private_png = (tmp_path / "private" / "by_text.png").read_bytes()
    assert private_png != (tmp_path / "plain" / "by_text.png").read_bytes()
    # the private chart is exactly the chart of the masked labels
    masked_db = tmp_path / "masked"
    rows = LanceSink(db).table("steps").to_arrow()
    LanceSink(masked_db).table("steps").add(mask_columns(rows, mask_text))
    run_plan(plan, masked_db, tmp_path / "of-masked")
    assert private_png == (tmp_path / "of-masked" / "by_text.png").read_bytes()
    assert json.loads((tmp_path / "private" / "manifest.json").read_text())
