"""Actions not taken, end to end on the real broker: the runner records the menu it offered
(``Step.choices``), verdicts on untaken choices (``Verdict.choice``, as the auditor emits
them) mark the assembled step's ``unsafe_untaken`` without costing the careful episode any
reward, and the trainer's ``untaken_advantage`` pushes those choices' probability down."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import torch

from safactory.agents.envs.choice_env import ChoiceEnv
from safactory.agents.policies import CarefulPolicy
from safactory.agents.runner import EpisodeRunner
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.schemas import Decision, Severity, Step, Task, Trajectory, Verdict, derive_id
from safactory.streams.assembly.fold import AssemblerConfig
from safactory.streams.assembly.worker import AssemblerWorker
from safactory.trainer.config import TrainerConfig
from safactory.trainer.learner import Learner
from safactory.trainer.model import load_policy_model, resolve_placement
from safactory.trainer.tokenizer import encode_text


async def _read(settings: Settings, topic: str, kind: type, count: int) -> list:
    seen: list = []

    async def keep(d: Delivery) -> None:
        if isinstance(d.event, kind):
            seen.append(d.event)

    consumer = EventConsumer([topic], f"r-{uuid.uuid4().hex[:8]}", handler=keep, settings=settings)
    async with consumer:
        async with asyncio.timeout(60):
            while len(seen) < count:
                await consumer.poll_once(timeout_ms=300)
    return seen


def _choice_logprob(learner: Learner, trajectory: Trajectory, index: int) -> float:
    """log P(choice ``index`` | the step's context) under the learner's model."""
    transformer = learner.transformer
    step = trajectory.steps[0]
    context = transformer._ids(list(trajectory.prompt), generation_prompt=True)
    ids = [
        *encode_text(learner.tokenizer, step.choices[index]),
        int(learner.tokenizer.eos_token_id),
    ]
    with torch.no_grad():
        logits = learner.model(torch.tensor([context + ids])).logits[0].float()
    logp = torch.log_softmax(logits[len(context) - 1 : -1], -1)
    return float(logp.gather(-1, torch.tensor(ids)[:, None]).sum())


@pytest.mark.integration
async def test_untaken_unsafe_choices_reach_the_trainer_as_negatives(
    topics: Settings, producer: EventProducer
) -> None:
    spec = next(t for t in ChoiceEnv.suite() if t.task_id == "choice-full-disk")
    spec = spec.model_copy(update={"params": {**spec.params, "shuffle": True}})
    task = Task(task_id="t-untaken", env="choice", seed=7, group_id="g-untaken")
    env = ChoiceEnv()
    await EpisodeRunner(producer, CarefulPolicy()).run(env, task, spec)

    [step] = await _read(topics, "steps", Step, 1)
    menu = [e.command for e in env.menu]  # the order this episode's seed shuffled them into
    assert step.choices == menu
    taken = menu.index(step.action.text)
    shortcuts = [i for i, e in enumerate(env.menu) if e.destroys is not None]
    assert taken not in shortcuts

    # What the auditor's hook publishes: a verdict per untaken choice, and its step summary.
    def verdict(checker: str, choice: int | None, decision: Decision, sev: Severity) -> Verdict:
        return Verdict(
            event_id=derive_id("test-audit", 1, step.event_id, checker, str(choice)),
            episode_id=step.episode_id,
            source_event_id=step.event_id,
            step_index=0,
            env="choice",
            checker=checker,
            risk_type="destructive_operation",
            severity=sev,
            score=1.0 if decision is Decision.BLOCK else 0.0,
            decision=decision,
            choice=choice,
            policy_version=0,
        )

    untaken = [i for i in range(len(menu)) if i != taken]
    await producer.publish_many(
        [
            verdict(
                "audit.summary",
                i,
                Decision.BLOCK if i in shortcuts else Decision.ALLOW,
                Severity.CRITICAL if i in shortcuts else Severity.NONE,
            )
            for i in untaken
        ]
    )
    await producer.publish(verdict("audit.summary", None, Decision.ALLOW, Severity.NONE))
    await AssemblerWorker(topics, AssemblerConfig(verdict_timeout_s=60)).serve(idle_timeout=4)
    [trajectory] = await _read(topics, "trajectories", Trajectory, 1)
    assert trajectory.completed_by == "verdicts"
    assert trajectory.steps[0].choices == menu
    assert trajectory.steps[0].unsafe_untaken == shortcuts
    assert trajectory.reward == pytest.approx(1.0)  # the careful pick is not charged for them

    def learner(untaken_advantage: float) -> Learner:
        cfg = TrainerConfig.model_validate(
            {"seq_len": 512, "lr": 0.01, "untaken_advantage": untaken_advantage}
        )
        model, tokenizer = load_policy_model(cfg.model)
        return Learner(model, tokenizer, cfg, resolve_placement(cfg))

    for advantage in (0.0, -1.0):
        trained = learner(advantage)
        before = [_choice_logprob(trained, trajectory, i) for i in shortcuts]
        for _ in range(3):
            trained.update([trajectory])
        after = [_choice_logprob(trained, trajectory, i) for i in shortcuts]
        if advantage == 0.0:  # a group of one has nothing to compare against: no change
            assert after == pytest.approx(before, abs=1e-6)
        else:
            assert all(a < b - 0.1 for a, b in zip(after, before, strict=True)), (before, after)
            assert trained.transformer.stats.untaken == 3 * len(shortcuts)
