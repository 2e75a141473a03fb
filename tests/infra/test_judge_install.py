"""A judge-only install pulls no torch: pip resolves the core dependencies (no extra) from
the package index and none of them, nor anything they need, is torch or transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"torch", "transformers", "sentence-transformers", "accelerate", "triton"}


def test_the_core_dependencies_resolve_without_torch(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    subprocess.run(
        [*pip, "--report", str(report), str(ROOT)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    names = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert "onnxruntime" in names and "lancedb" in names  # the resolution really ran
    assert not names & HEAVY, sorted(names & HEAVY)
