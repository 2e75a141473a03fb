"""Decide only where precision is measured: a finding blocks or warns by its checker's measured
precision at that score, and is ``uncertain`` otherwise (never silently allowed)."""

from __future__ import annotations

import asyncio

from helpers_audit import make_step

from safactory.schemas import Decision, Severity
from safactory.streams.audit.api import Checker, Finding
from safactory.streams.audit.calibration import (
    BANDS,
    BLOCK_PRECISION,
    Calibration,
    Cell,
    default_calibration,
)
from safactory.streams.audit.engine import AuditEngine, Policy
from safactory.tools.audit_training.calibrate import Judged, fit


class Fires(Checker):
    name = "test.fires"
    kind = "heuristic"
    risk_types = ("fraud",)

    def __init__(self, score: float = 0.95, severity: Severity = Severity.HIGH) -> None:
        self.score, self.severity = score, severity

    def check(self, view):
        return [Finding("fraud", self.score, self.severity, "planted")]


def decide(cells: tuple[Cell | None, ...] | None, checker: Fires | None = None) -> Decision:
    table = Calibration({} if cells is None else {"test.fires": cells})
    engine = AuditEngine([checker or Fires()], policy=Policy(calibration=table))
    return asyncio.run(engine.audit_step(make_step(0, reply="x"))).decision


def every_band(cell: Cell) -> tuple[Cell, ...]:
    return (cell,) * len(BANDS)


def test_an_unmeasured_checker_is_uncertain_never_allowed() -> None:
    assert decide(None) == Decision.UNCERTAIN


def test_measured_precision_earns_block_and_warn() -> None:
    precise = every_band(Cell(995, 1000, 0.99))
    assert decide(precise) == Decision.BLOCK
    assert decide(precise, Fires(severity=Severity.MEDIUM)) == Decision.WARN  # not severe
    fair = every_band(Cell(880, 1000, 0.85))
    assert decide(fair) == Decision.WARN  # ≥ 80 %, < 90 %
    poor = every_band(Cell(600, 1000, 0.55))
    assert decide(poor) == Decision.UNCERTAIN


def test_few_firings_are_not_enough_and_one_imprecise_source_vetoes() -> None:
    assert decide(every_band(Cell(3, 3))) == Decision.UNCERTAIN  # 3 of 3: lower bound 0.6
    uneven = every_band(Cell(960, 1000, worst=0.7))  # 96 % overall, 70 % on one source
    assert decide(uneven) == Decision.WARN
    assert Cell(960, 1000).lower >= BLOCK_PRECISION
    # wrong more often than right on one source: not even a warning, anywhere
    assert decide(every_band(Cell(900, 1000, worst=0.21))) == Decision.UNCERTAIN
    assert decide(every_band(Cell(900, 1000, worst=0.5))) == Decision.WARN


def test_below_the_first_band_nothing_fired() -> None:
    precise = every_band(Cell(995, 1000, 0.99))
    assert decide(precise, Fires(score=0.3)) == Decision.ALLOW


def test_fit_counts_firings_per_band_and_caps_a_large_source() -> None:
    def row(unsafe: bool, score: float) -> Judged:
        return Judged(unsafe, [{"c": (score, Severity.HIGH.rank)}], 0.0)

    table = fit(
        {
            "big": [row(True, 0.95)] * 1000 + [row(False, 0.95)] * 10,
            "small": [row(True, 0.95)] * 5 + [row(False, 0.95)] * 15,
            "quiet": [Judged(False, [{}], 0.0)] * 50,  # nothing fired: counts for no cell
        }
    )
    low, mid, high = table.cells["c"]
    assert low is None and mid is None and high is not None
    assert high.total == 200 + 20  # the big source counts as 200 firings
    assert high.worst == 0.25  # the small source saw it right 5 times in 20
    assert Calibration.from_json(table.to_json()) == table


def test_the_shipped_table_measured_the_default_checkers_on_several_sources() -> None:
    shipped = default_calibration()
    assert {"own-envs", "rjudge", "agentdojo", "toolemu"} <= set(shipped.sources)
    assert "everyday" not in shipped.sources  # the everyday test traces are never fitted on
    for name in ("harm.steered_action", "harm.beyond_scope", "harm.data_leak", "rule.pii"):
        assert name in shipped.cells
