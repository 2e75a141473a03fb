"""Scientific data through DataElf end to end (``data ask --plan``, sandboxed): sequences,
an EEG recording and molecules read by the field's libraries into rows the other
operators filter, rank and export."""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.sinks.dataelf.plan import Plan
from safactory.sinks.dataelf.science import band_power

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from eeg_reader_choice import write_edf

runner = CliRunner()


def ask(tmp_path: Path, steps: list[dict], *flags: str) -> tuple[str, Path]:
    """Run ``steps`` with ``data ask --plan`` from ``tmp_path`` (paths in them relative)."""
    (tmp_path / "db").mkdir(exist_ok=True)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"steps": steps}))
    out = tmp_path / "run"
    args = ["data", "ask", "--plan", str(plan), "--db", "db", "--out", "run", "--yes", *flags]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output, out


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_sequences_from_fasta_and_fastq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    seqs = {"rich": "GGCCGCGCAT", "poor": "ATATATATGC", "half": "ACGTACGTAC"}
    Path("reads.fa").write_text("".join(f">{k} sample\n{v}\n" for k, v in seqs.items()))
    _, out = ask(
        tmp_path,
        [
            {"op": "read_sequences", "path": "reads.fa"},
            {"op": "where", "column": "gc_content", "min": 0.5},
            {"op": "export", "format": "csv", "name": "gc.csv"},
        ],
    )
    got = {r["id"]: float(r["gc_content"]) for r in rows(out / "gc.csv")}
    want = {k: sum(c in "GC" for c in v) / len(v) for k, v in seqs.items()}
    assert got == pytest.approx({k: g for k, g in want.items() if g >= 0.5})
    assert set(got) == {"rich", "half"}

    Path("run").rename("run-fasta")
    Path("reads.fq").write_text("@r1\nACGT\n+\nIIII\n@r2\nGGGG\n+\n!!5I\n")
    _, out = ask(
        tmp_path,
        [
            {"op": "read_sequences", "path": "reads.fq"},
            {"op": "export", "format": "csv", "name": "q.csv"},
        ],
    )
    quality = {r["id"]: float(r["mean_quality"]) for r in rows(out / "q.csv")}
    assert quality == pytest.approx({"r1": 40.0, "r2": (0 + 0 + 20 + 40) / 4})


def test_eeg_band_power_per_channel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rate, seconds = 256, 10
    t = np.arange(rate * seconds) / rate
    signals = {"Oz": 40.0 * np.sin(2 * math.pi * 10 * t), "Cz": 20.0 * np.sin(2 * math.pi * 20 * t)}
    write_edf(Path("rec.edf"), signals, rate)
    _, out = ask(
        tmp_path,
        [
            {"op": "read_eeg", "path": "rec.edf"},
            {"op": "export", "format": "csv", "name": "bands.csv"},
        ],
    )
    got = {r["channel"]: r for r in rows(out / "bands.csv")}
    assert set(got) == {"Oz", "Cz"} and float(got["Oz"]["seconds"]) == seconds
    # a sine of amplitude a holds a²/2 of power, in the band of its frequency
    assert float(got["Oz"]["alpha"]) == pytest.approx(40.0**2 / 2, rel=0.05)
    assert float(got["Cz"]["beta"]) == pytest.approx(20.0**2 / 2, rel=0.05)
    assert float(got["Oz"]["beta"]) < 0.01 * float(got["Oz"]["alpha"])


def test_a_band_above_the_nyquist_rate_is_null() -> None:
    t = np.arange(600) / 60.0
    power = band_power(np.sin(2 * math.pi * 5 * t), 60.0)
    assert power["gamma"] is None and power["theta"] == pytest.approx(0.5, rel=0.05)


def test_molecules_from_smiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("mols.smi").write_text("# name list\nCCO ethanol\nc1ccccc1 benzene\nC1CC(broken\n")
    _, out = ask(
        tmp_path,
        [
            {"op": "read_molecules", "path": "mols.smi"},
            {"op": "top", "column": "molecular_weight", "k": 3},
            {"op": "export", "format": "csv", "name": "mols.csv"},
        ],
    )
    got = {r["name"]: r for r in rows(out / "mols.csv")}
    assert float(got["benzene"]["molecular_weight"]) == pytest.approx(78.114, abs=0.01)
    assert float(got["ethanol"]["molecular_weight"]) == pytest.approx(46.069, abs=0.01)
    assert got["ethanol"]["formula"] == "C2H6O" and got["benzene"]["heavy_atoms"] == "6"
    assert got["line 4"]["valid"] == "false" and got["line 4"]["molecular_weight"] == ""


def test_a_missing_file_is_named_and_a_reader_only_starts_a_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "db").mkdir()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"steps": [{"op": "read_molecules", "path": "none.smi"}]}))
    result = runner.invoke(app, ["data", "ask", "--plan", str(plan), "--db", "db", "--yes"])
    assert result.exit_code != 0 and "none.smi" in result.output
    assert "not a readable file" in result.output
    with pytest.raises(ValueError, match="read_eeg only starts a plan"):
        Plan.model_validate(
            {"steps": [{"op": "select", "table": "steps"}, {"op": "read_eeg", "path": "x.edf"}]}
        )


def test_a_file_not_in_its_format_gets_a_sentence_and_a_symlinked_out_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "db").mkdir()
    Path("notes.fq").write_text("these are notes, not reads\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"steps": [{"op": "read_sequences", "path": "notes.fq"}]}))
    args = ["data", "ask", "--plan", str(plan), "--db", "db", "--yes"]
    said = runner.invoke(app, [*args, "--out", "run"]).output
    assert "notes.fq could not be read as FASTQ: a FASTQ file holds records of four" in said
    Path("elsewhere").mkdir()
    Path("link").symlink_to("elsewhere")
    refused = runner.invoke(app, [*args, "--out", "link"])
    assert refused.exit_code == 2 and "--out link is a symbolic link (to elsewhere)" in (
        refused.output
    )
    assert list(Path("elsewhere").iterdir()) == []
