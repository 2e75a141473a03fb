"""``source infra/scripts/bootstrap.sh`` in a person's shell: the exports arrive, and its
``set -euo pipefail`` does not (a later failing command must not close their terminal)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_sourcing_bootstrap_leaves_the_shell_options_and_exports_the_venv() -> None:
    script = (
        f"source {ROOT / 'infra/scripts/bootstrap.sh'} >/dev/null 2>&1; echo rc=$?; "
        'echo "opts=$-"; false; echo "still here"; command -v safactory; echo "venv=$SF_VENV"'
    )
    done = subprocess.run(
        ["bash", "-i", "-c", script], capture_output=True, text=True, timeout=900, stdin=None
    )
    out = done.stdout
    assert "rc=0" in out and "still here" in out, (out, done.stderr[-2000:])
    opts = next(line for line in out.splitlines() if line.startswith("opts="))
    assert "e" not in opts.removeprefix("opts=") and "u" not in opts.removeprefix("opts=")
    venv = next(line for line in out.splitlines() if line.startswith("venv="))[5:]
    assert venv and f"{venv}/bin/safactory" in out
