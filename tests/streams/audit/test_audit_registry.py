"""Registry: built-ins, coverage of the risk types, plugins through entry points."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from safactory.streams.audit import registry
from safactory.streams.audit.api import RiskType


def test_builtins_cover_every_risk_type_with_every_kind() -> None:
    factories = registry.available()
    builtin = {n: f for n, f in factories.items() if isinstance(f, type)}
    assert len(builtin) >= 20
    kinds = {f.kind for f in builtin.values()}
    assert kinds == {"rule", "heuristic", "model", "deep"}  # the judge is a tier, not a checker
    covered = {r for f in builtin.values() for r in f.risk_types}
    missing = set(RiskType.PRIMARY + RiskType.SECONDARY) - covered
    assert not missing, missing


def test_the_whole_episode_judge_is_off_by_default() -> None:
    assert "deep.episode_judge" in registry.available()
    assert "deep.episode_judge" not in registry.default_names()


def test_unknown_checker_names_the_known_ones() -> None:
    with pytest.raises(registry.RegistryError, match=r"rule\.secrets"):
        registry.create(["no.such.checker"])


def test_plugin_checker_loads_through_entry_point(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "sf_plugin_demo"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        from safactory.streams.audit.api import Checker, Finding
        from safactory.schemas import Severity

        class Shouty(Checker):
            name = "plugin.shouty"
            kind = "rule"
            risk_types = ("harmful_content",)

            def check(self, view):
                text = view.step.action.text or ""
                if not text.isupper():
                    return []
                return [Finding("harmful_content", 1.0, Severity.LOW, "caps")]
    """)
    )
    dist = tmp_path / "sf_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sf-plugin-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[safactory.checkers]\nplugin.shouty = sf_plugin_demo:Shouty\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "plugin.shouty" in registry.available()
    from helpers_audit import make_step, run_checker

    assert run_checker("plugin.shouty", make_step(0, reply="STOP")) != []
    sys.modules.pop("sf_plugin_demo", None)
