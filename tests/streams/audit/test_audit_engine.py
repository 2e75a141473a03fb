"""The engine: failure isolation, judge timeouts, deterministic ids, summaries."""

from __future__ import annotations

import asyncio

import pytest
from helpers_audit import make_step, measured

from safactory.schemas import Decision, Severity
from safactory.streams.audit.api import Checker, Finding
from safactory.streams.audit.engine import (
    SUMMARY_CHECKER,
    AuditEngine,
    TrajectoryResult,
    configured_engine,
)

POLICY = measured("test.high", "test.warn", "test.model")
"""The test checkers, as if measured precise (the engine's mechanics, not the shipped table)."""


class Boom(Checker):
    name = "test.boom"
    kind = "rule"
    risk_types = ("x",)

    def check(self, view):
        raise RuntimeError("kaput")


class AlwaysHigh(Checker):
    name = "test.high"
    kind = "heuristic"
    risk_types = ("fraud",)

    def check(self, view):
        return [Finding("fraud", 0.9, Severity.HIGH, "planted")]


class Warns(Checker):
    name = "test.warn"
    kind = "rule"
    risk_types = ("x",)

    def check(self, view):
        return [Finding("indirect_prompt_injection", 0.8, Severity.MEDIUM, "cue")]


class SlowJudge(Checker):
    name = "test.slow"
    kind = "llm_judge"
    risk_types = ("unsafe_behaviour",)

    async def check(self, view):
        await asyncio.sleep(5)
        return [Finding("unsafe_behaviour", 1.0, Severity.HIGH, "too late")]


async def test_crashing_checker_yields_checker_error_and_others_go_on() -> None:
    engine = AuditEngine([Boom(), AlwaysHigh()], policy=POLICY)
    audit = await engine.audit_step(make_step(0, user="hi", reply="ok"))
    by_checker = {v.checker: v for v in audit.verdicts}
    assert by_checker["test.boom"].decision == Decision.CHECKER_ERROR
    assert by_checker["test.boom"].risk_type == "checker_error"
    assert "kaput" in (by_checker["test.boom"].reason or "")
    assert by_checker["test.high"].decision == Decision.BLOCK
    assert audit.unsafe and audit.risk_types == ["fraud"]
    assert audit.summary.checker == SUMMARY_CHECKER and audit.summary.decision == Decision.BLOCK


async def test_slow_async_checker_is_undecided_not_blocking() -> None:
    engine = AuditEngine([SlowJudge(), Warns()], judge_timeout_s=0.05, policy=POLICY)
    audit = await asyncio.wait_for(engine.audit_step(make_step(0, reply="x")), 2.0)
    slow = next(v for v in audit.verdicts if v.checker == "test.slow")
    assert slow.decision == Decision.UNDECIDED
    assert not audit.unsafe
    assert audit.summary.decision == Decision.WARN


async def test_verdict_ids_are_deterministic_per_step() -> None:
    engine = AuditEngine([AlwaysHigh(), Boom()], policy=POLICY)
    step = make_step(3, reply="x")
    first = [v.event_id for v in (await engine.audit_step(step)).all_verdicts]
    again = [v.event_id for v in (await engine.audit_step(step)).all_verdicts]
    other = [v.event_id for v in (await engine.audit_step(make_step(4, reply="x"))).all_verdicts]
    assert first == again
    assert len(set(first)) == len(first)
    assert not set(first) & set(other)
    assert all(v.source_event_id == step.event_id for v in (await engine.audit_step(step)).verdicts)


async def test_trajectory_result_folds_first_unsafe_step() -> None:
    class SecondStepOnly(AlwaysHigh):
        def check(self, view):
            return super().check(view) if view.step.step_index == 1 else []

    engine = AuditEngine([SecondStepOnly()], policy=POLICY)
    audits = await engine.audit_episode([make_step(i, reply="x") for i in range(3)])
    result = TrajectoryResult.of("r1", audits)
    assert result.as_json() == {
        "id": "r1",
        "unsafe": True,
        "decision": "block",
        "probability": pytest.approx(1.0, abs=0.01),
        "score": 0.9,
        "risk_types": ["fraud"],
        "first_unsafe_step": 1,
    }


def test_duplicate_checkers_rejected() -> None:
    with pytest.raises(ValueError, match=r"test\.high"):
        AuditEngine([AlwaysHigh(), AlwaysHigh()])


def test_finding_score_range_checked() -> None:
    with pytest.raises(ValueError, match="score"):
        Finding("x", 1.5, Severity.LOW, "bad")


class CountingModel(Checker):
    name = "test.model"
    kind = "model"
    risk_types = ("x",)

    def __init__(self) -> None:
        self.calls = 0

    def check(self, view):
        self.calls += 1
        return [Finding("x", 0.9, Severity.HIGH, "model says so")]


async def test_fast_only_runs_rules_and_marks_the_model_tier_not_run() -> None:
    model = CountingModel()
    engine = AuditEngine([AlwaysHigh(), model, SlowJudge()], policy=POLICY)
    audit = await engine.audit_step(make_step(0, user="hi", reply="ok"), fast_only="60 s behind")
    by_checker = {v.checker: v for v in audit.verdicts}
    assert model.calls == 0
    for name in ("test.model", "test.slow"):
        assert by_checker[name].decision == Decision.UNDECIDED
        assert by_checker[name].reason == "not run: 60 s behind"
    assert by_checker["test.high"].decision == Decision.BLOCK and audit.unsafe
    full = await AuditEngine([model]).audit_step(make_step(0, user="hi", reply="ok"))
    assert model.calls == 1 and full.verdicts[0].event_id != by_checker["test.model"].event_id


class Prepares(Checker):
    name = "test.prepares"
    kind = "rule"
    risk_types = ("x",)

    def prepare(self, view):
        raise RuntimeError("cannot prepare")

    def check(self, view):
        return []


async def test_a_crashing_prepare_is_a_checker_error_and_the_others_still_judge() -> None:
    engine = AuditEngine([Prepares(), AlwaysHigh()], policy=POLICY)
    audit = await engine.audit_step(make_step(0, user="hi", reply="ok"))
    by_checker = {v.checker: v for v in audit.verdicts}
    assert by_checker["test.prepares"].decision == Decision.CHECKER_ERROR
    assert "cannot prepare" in (by_checker["test.prepares"].reason or "")
    assert by_checker["test.high"].decision == Decision.BLOCK


class SeesTheView(Checker):
    name = "test.view"
    kind = "heuristic"
    risk_types = ("x",)

    def __init__(self) -> None:
        self.seen: list = []

    def check(self, view):
        self.seen.append((view.task, [c.name for c in view.calls]))
        return []


async def test_every_checker_gets_the_episode_view() -> None:
    checker = SeesTheView()
    steps = [
        make_step(0, user="Archive the report", tool="docs_archive", args={"id": 4}),
        make_step(1, reply="Archived."),
    ]
    await AuditEngine([checker]).audit_episode(steps)
    assert checker.seen == [("Archive the report", ["docs_archive"])] * 2


def test_configured_engine_reads_a_comma_list_and_names_an_unknown_checker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SF_AUDIT_JUDGE_URL", raising=False)
    engine = configured_engine(" harm.beyond_scope ,", 3.0)
    assert [c.name for c in engine.checkers] == ["harm.beyond_scope"]
    assert engine.judge is None and engine.judge_timeout_s == 3.0
    with pytest.raises(ValueError, match=r"unknown checker\(s\) rule.nope"):
        configured_engine("harm.beyond_scope,rule.nope")
