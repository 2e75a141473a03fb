"""The auditor's stream logic without Kafka: bounded per-episode context, the steps that fall
out of it (the worker tombstones them), and redelivery."""

from __future__ import annotations

import asyncio

from helpers_audit import make_step, measured

from safactory.streams.audit import registry
from safactory.streams.audit.engine import AuditEngine
from safactory.streams.audit.processor import (
    HEAD_STEPS,
    AuditProcessor,
    decode_step,
    encode_step,
)


def processor(limit: int) -> AuditProcessor:
    return AuditProcessor(AuditEngine(registry.create(["rule.secrets"])), context_limit=limit)


def test_context_keeps_the_task_and_the_latest_steps_and_names_the_dropped() -> None:
    proc = processor(limit=4)
    steps = [make_step(0, user="List my files", tool="ls", args={"path": "."}, result="a b")]
    steps += [make_step(i, tool="ls", args={"path": f"d{i}"}, result="x") for i in range(1, 7)]
    stored: list = []
    dropped: list[str] = []
    for step in steps:
        result = asyncio.run(proc.process(step, stored))
        stored = [decode_step(encode_step(s)) for s in result.context]  # as restored
        dropped += result.dropped
    assert [s.step_index for s in stored] == [*range(HEAD_STEPS), 5, 6]
    assert dropped == [steps[2].event_id, steps[3].event_id, steps[4].event_id]
    assert stored[0].messages[0].content == "List my files"


def test_redelivered_step_replaces_itself_and_yields_the_same_verdict_ids() -> None:
    proc = processor(limit=8)
    leak = make_step(1, tool="post", args={"body": "key AKIAIOSFODNN7EXAMPLE"})
    first = asyncio.run(proc.process(leak, [make_step(0, user="hi", reply="hello")]))
    again = asyncio.run(proc.process(leak, first.context))
    assert [v.event_id for v in again.verdicts] == [v.event_id for v in first.verdicts]
    assert any(v.risk_type == "secret_exposure" for v in first.verdicts)
    assert [s.step_index for s in again.context] == [0, 1]
    assert again.dropped == []


async def test_the_deep_tier_judges_an_episode_once_it_ended_and_not_step_by_step() -> None:
    from safactory.schemas import Severity
    from safactory.streams.audit.api import Checker, Finding

    class Deep(Checker):
        name = "test.deep"
        kind = "deep"
        risk_types = ("x",)

        def check(self, view):
            if view.call is None:
                return []
            return [Finding("fraud", 0.9, Severity.HIGH, f"saw {len(view.context)} before")]

    processor = AuditProcessor(AuditEngine([Deep()], policy=measured("test.deep")))
    steps = [
        make_step(i, user="pay" if i == 0 else None, tool="bank_pay", args={"n": i})
        for i in range(3)
    ]
    live = await processor.process(steps[0], [])
    assert [v.checker for v in live.audit.verdicts] == []  # not per step
    verdicts, alerts = await processor.finish(steps)
    deep = [v for v in verdicts if v.checker == "test.deep"]
    assert [v.reason for v in deep] == ["saw 0 before", "saw 1 before", "saw 2 before"]
    assert len(alerts) == 3
    again, _ = await processor.finish(list(reversed(steps)))
    assert [v.event_id for v in again] == [v.event_id for v in verdicts]
