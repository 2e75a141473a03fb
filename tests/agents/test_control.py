"""Real-time intervention: the control policy turns verdicts into decisions, and a running
episode obeys ``sf.control`` read from the real broker (halt, pause until approved or denied,
block the next action)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

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
    Step,
    Task,
    Verdict,
)
from safactory.streams.control import ControlPolicy, ControlRule


def _verdict(severity: Severity, risk: str = "destructive_operation", **extra: object) -> Verdict:
    return Verdict(
        episode_id="ep",
        source_event_id="step-3",
        step_index=3,
        checker="rule.rm",
        risk_type=risk,
        severity=severity,
        score=1.0,
        decision=Decision.BLOCK,
        reason="recursive delete of /",
        **extra,  # type: ignore[arg-type]
    )


def test_the_policy_halts_on_critical_and_pauses_on_high_exfiltration() -> None:
    policy = ControlPolicy(
        rules=[
            ControlRule(command=ControlCommand.HALT, min_severity=Severity.CRITICAL),
            ControlRule(
                command=ControlCommand.PAUSE,
                min_severity=Severity.HIGH,
                risk_types=["data_exfiltration"],
            ),
        ]
    )
    critical = _verdict(Severity.CRITICAL)
    halt = policy.decide(critical)
    assert halt is not None and halt.command is ControlCommand.HALT
    assert halt.verdict_ids == [critical.event_id]
    assert policy.decide(critical).event_id == halt.event_id  # the same id when re-decided
    assert (halt.episode_id, halt.source_event_id, halt.decided_by) == ("ep", "step-3", "policy")
    assert "critical destructive_operation at step 3" in halt.reason
    again = policy.decide(critical.model_copy(update={"event_id": "x"}))
    assert again is not None and again.event_id != halt.event_id  # derived from the verdict
    pause = policy.decide(_verdict(Severity.HIGH, "data_exfiltration"))
    assert pause is not None and pause.command is ControlCommand.PAUSE
    assert policy.decide(_verdict(Severity.HIGH)) is None  # high, another risk type
    assert policy.decide(_verdict(Severity.CRITICAL, choice=2)) is None  # an untaken choice
    allowed = _verdict(Severity.CRITICAL).model_copy(update={"decision": Decision.ALLOW})
    assert policy.decide(allowed) is None
    assert ControlPolicy().decide(_verdict(Severity.CRITICAL)) is None  # default: off


class _Counter(Environment):
    """Five steps; each action that runs is counted (what ran is what the env saw)."""

    name = "counter"

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    @classmethod
    def suite(cls) -> list[TaskSpec]:
        return [TaskSpec(task_id="count", kind="capability", instruction="count", max_steps=5)]

    def reset(self, task: TaskSpec, seed: int = 0) -> ResetOutput:
        self.task, self.ran = task, []
        return ResetOutput(prompt=[ChatMessage(role="user", content="count")])

    def step(self, action: Action) -> StepOutput:
        self.ran.append(action.text or "")
        return StepOutput(observation=f"ran {len(self.ran)}", terminated=len(self.ran) >= 5)

    def judge(self) -> Judgement:
        return Judgement(success=len(self.ran) >= 5, reward=1.0, safety=SafetyOutcome(unsafe=False))

    def checkpoint(self) -> Anchor:
        return Anchor(self.name, len(self.ran), list(self.ran))

    def restore(self, anchor: Anchor) -> None:
        self.ran = list(anchor.state)


class _Gated(Policy):
    """Acts at once, except at step ``hold_at``, where it waits for ``gate``."""

    name = "gated"

    def __init__(self, hold_at: int) -> None:
        self.hold_at, self.gate, self.holding = hold_at, asyncio.Event(), asyncio.Event()

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        if inp.step_index == self.hold_at:
            self.holding.set()
            await self.gate.wait()
        action = Action(text=f"step {inp.step_index}")
        return PolicyOutput(action=action, message=assistant_message(action))


class _Kept:
    def __init__(self, producer: EventProducer) -> None:
        self.producer, self.sent = producer, []

    async def publish(self, event: Event) -> object:
        self.sent.append(event)
        return await self.producer.publish(event)


async def _decided(follower: ControlFollower, episode: str, control: Control) -> None:
    async with asyncio.timeout(30):
        seen = follower.latest(episode)
        while seen != control:
            seen = await follower.changed(episode, seen)


def _control(episode: str, command: ControlCommand, n: int) -> Control:
    return Control(
        event_id=f"c-{episode}-{n}",
        episode_id=episode,
        command=command,
        reason=f"{command.value} by the test",
        verdict_ids=[f"v-{n}"],
        decided_by="person:test" if command is not ControlCommand.HALT else "policy",
    )


@pytest.mark.integration
@pytest.mark.parametrize("answer", ["halt", "approve", "deny", "block"])
async def test_a_running_episode_obeys_control_from_the_topic(
    topics: Settings, producer: EventProducer, answer: str
) -> None:
    async with ControlFollower(topics) as follower:
        kept, env, policy = _Kept(producer), _Counter(), _Gated(hold_at=2)
        episode = f"ep-{uuid.uuid4().hex[:8]}"
        runner = EpisodeRunner(kept, policy, control=follower, approval_timeout_s=60)
        task = Task(task_id="count", env="counter")
        running = asyncio.create_task(runner.run(env, task, _Counter.suite()[0], episode))
        await policy.holding.wait()  # steps 0 and 1 ran; step 2's action is proposed
        command = {"halt": ControlCommand.HALT, "block": ControlCommand.BLOCK_ACTION}.get(
            answer, ControlCommand.PAUSE
        )
        first = _control(episode, command, 1)
        await producer.publish(first)
        await _decided(follower, episode, first)
        policy.gate.set()
        if answer in ("approve", "deny"):
            await asyncio.sleep(0.5)
            assert not running.done() and env.ran == ["step 0", "step 1"]  # held by the pause
            command = ControlCommand.RESUME if answer == "approve" else ControlCommand.HALT
            await producer.publish(_control(episode, command, 2))
        result = await asyncio.wait_for(running, 30)
    ended = next(e for e in kept.sent if isinstance(e, EpisodeEnded))
    steps = [e for e in kept.sent if isinstance(e, Step)]
    if answer in ("halt", "deny"):
        assert result.outcome is Outcome.HALTED and ended.outcome is Outcome.HALTED
        assert ended.halted_by == (["v-1"] if answer == "halt" else ["v-2"])
        assert env.ran == ["step 0", "step 1"] and len(steps) == 2  # step 2 never ran
    elif answer == "approve":
        assert result.outcome is Outcome.SUCCESS and len(env.ran) == 5
    else:  # blocked once, then on
        assert steps[2].blocked and steps[2].block_reason == "control: block_action by the test"
        assert env.ran == ["step 0", "step 1", "step 3", "step 4", "step 5"]
        assert result.outcome is Outcome.SUCCESS
