"""Installed-package plugins for tests: a module and its entry points on ``sys.path``."""

from __future__ import annotations

from pathlib import Path

import pytest


def install_plugin(
    where: Path,
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    source: str,
    group: str,
    entries: dict[str, str],
) -> None:
    """Make ``module`` (its ``source``) importable from ``where``, as a distribution whose
    ``group`` entry points are ``entries`` (name → ``module:attribute``)."""
    (where / f"{module}.py").write_text(source)
    dist = where / f"{module}-0.1.dist-info"
    dist.mkdir()
    name = module.replace("_", "-")
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
    (dist / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    monkeypatch.syspath_prepend(str(where))
