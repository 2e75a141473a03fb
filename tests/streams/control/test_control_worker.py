"""The control worker on the real broker: a critical verdict becomes a halt on sf.control
that a running episode (another client, following the topic) obeys, ending halted with the
verdict's id; a replayed verdict stops nothing; a verdict whose decision raises is
dead-lettered and the worker goes on."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from poison import POISON, Poisoned, assert_poison_pill_dead_lettered
from topic_records import collect

from safactory.agents.control import ControlFollower
from safactory.agents.env import Anchor, Environment, Judgement, ResetOutput, StepOutput, TaskSpec
from safactory.agents.policies import Policy, PolicyInput, PolicyOutput
from safactory.agents.policies.base import assistant_message
from safactory.agents.runner import EpisodeRunner
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import (
    Action,
    ChatMessage,
    Control,
    ControlCommand,
    Decision,
    EpisodeEnded,
    Event,
    Outcome,
    SafetyOutcome,
    Severity,
    Task,
    Verdict,
    codec,
)
from safactory.schemas import headers as h
from safactory.streams.control import ControlPolicy, ControlRule
from safactory.streams.control.worker import control_runtime

pytestmark = pytest.mark.integration

HALT_CRITICAL = ControlPolicy(
    rules=[ControlRule(command=ControlCommand.HALT, min_severity=Severity.CRITICAL)]
)


def _verdict(episode: str, step: int, *, reason: str = "rm -rf / at the root") -> Verdict:
    return Verdict(
        episode_id=episode,
        source_event_id=f"{episode}-step-{step}",
        step_index=step,
        checker="rule.rm",
        risk_type="destructive_operation",
        severity=Severity.CRITICAL,
        score=1.0,
        decision=Decision.BLOCK,
        reason=reason,
    )


class _Slow(Environment):
    """Up to 50 steps of 50 ms each: long enough to be stopped mid-way."""

    name = "slow"

    @classmethod
    def suite(cls) -> list[TaskSpec]:
        return [TaskSpec(task_id="slow", kind="capability", instruction="go", max_steps=50)]

    def reset(self, task: TaskSpec, seed: int = 0) -> ResetOutput:
        self.task, self.ran = task, 0
        return ResetOutput(prompt=[ChatMessage(role="user", content="go")])

    def step(self, action: Action) -> StepOutput:
        self.ran += 1
        return StepOutput(observation=f"ran {self.ran}", terminated=self.ran >= 50)

    def judge(self) -> Judgement:
        return Judgement(success=self.ran >= 50, reward=1.0, safety=SafetyOutcome(unsafe=False))

    def checkpoint(self) -> Anchor:
        return Anchor(self.name, self.ran, self.ran)

    def restore(self, anchor: Anchor) -> None:
        self.ran = anchor.state


class _Steady(Policy):
    name = "steady"

    def __init__(self) -> None:
        self.third = asyncio.Event()

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        if inp.step_index == 3:
            self.third.set()
        await asyncio.sleep(0.05)
        action = Action(text=f"step {inp.step_index}")
        return PolicyOutput(action=action, message=assistant_message(action))


class _Kept:
    def __init__(self, producer: EventProducer) -> None:
        self.producer, self.sent = producer, []

    async def publish(self, event: Event) -> object:
        self.sent.append(event)
        return await self.producer.publish(event)


async def _serving(runtime):  # type: ignore[no-untyped-def]
    task = asyncio.create_task(runtime.serve())
    async with asyncio.timeout(60):
        while not runtime.assigned:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.05)
    return task


async def test_a_critical_verdict_halts_a_running_episode_and_a_replayed_one_does_not(
    topics: Settings, producer: EventProducer
) -> None:
    runtime = control_runtime(topics, HALT_CRITICAL)
    serving = await _serving(runtime)
    try:
        async with ControlFollower(topics) as follower:
            kept, env = _Kept(producer), _Slow()
            episode = f"ep-{uuid.uuid4().hex[:8]}"
            policy = _Steady()
            runner = EpisodeRunner(kept, policy, control=follower)
            running = asyncio.create_task(
                runner.run(env, Task(task_id="slow", env="slow"), _Slow.suite()[0], episode)
            )
            await asyncio.wait_for(policy.third.wait(), 30)
            replayed = codec.encode(_verdict(episode, 1, reason="a re-audit of the past"))
            await (
                await producer.send_raw(
                    topics.topic("verdicts"),
                    key=replayed.key,
                    value=replayed.value,
                    headers=[*replayed.headers, (h.REPLAY, b"r1")],
                )
            )
            await asyncio.sleep(1.0)
            assert not running.done()  # the replayed verdict stopped nothing
            live = _verdict(episode, 2)
            await producer.publish(live)
            result = await asyncio.wait_for(running, 30)
    finally:
        runtime.request_stop()
        await asyncio.wait_for(serving, 30)
    ended = next(e for e in kept.sent if isinstance(e, EpisodeEnded))
    assert result.outcome is Outcome.HALTED and ended.outcome is Outcome.HALTED
    assert ended.halted_by == [live.event_id]
    assert env.ran < 50
    decisions = await collect(topics, topics.topic("control"), lambda rs: len(rs) >= 1, 10)
    (halt,) = [codec.decode(r.value, r.headers) for r in decisions]
    assert isinstance(halt, Control) and halt.command is ControlCommand.HALT
    assert (halt.verdict_ids, halt.decided_by) == ([live.event_id], "policy")


async def test_a_verdict_whose_decision_raises_is_dead_lettered(
    topics: Settings, producer: EventProducer
) -> None:
    class Raising(ControlPolicy):
        def decide(self, verdict: Verdict) -> Control | None:
            if verdict.reason == POISON:
                raise Poisoned(POISON)
            return super().decide(verdict)

    runtime = control_runtime(topics, Raising(rules=HALT_CRITICAL.rules))
    good = [_verdict(f"ep-{i}", i) for i in range(6)]
    poison = _verdict("ep-poison", 9, reason=POISON)

    async def publish() -> None:
        await producer.publish_many([*good[:3], poison, *good[3:]])

    dead = await assert_poison_pill_dead_lettered(
        topics, runtime, publish, lambda: runtime.stats().out >= len(good)
    )
    assert codec.decode(dead.value, dead.headers).event_id == poison.event_id
