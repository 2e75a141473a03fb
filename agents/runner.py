"""The episode runner: one episode of one task, every step published before the next.

Order of events on the wire for an episode: ``EpisodeStarted``, then each ``Step`` (acked
by the cluster before the agent moves on, stamped with the ``sf-policy-version`` of the
weights that chose its action), then ``EpisodeEnded`` with the environment's own judgement
of task success and safety. All three are keyed by the episode id, so they stay in order
in one partition.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

from ..schemas import (
    ChatMessage,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Injection,
    Outcome,
    Step,
    Task,
    Timing,
    new_id,
)
from .attacks import AttackInjector, make_injector
from .env import Environment, Judgement, StepOutput, TaskSpec
from .guard import Guard, ProposedAction
from .policies.base import Policy, PolicyInput

log = logging.getLogger(__name__)
HARD_STEP_LIMIT = 1000
"""Steps after which the runner stops an episode whose env never truncates it."""


class Publisher(Protocol):
    """Where events go (:class:`safactory.infra.producer.EventProducer`)."""

    async def publish(self, event: Event) -> Any:
        """Send one event and wait for the acknowledgement."""
        ...


@dataclass(frozen=True)
class EpisodeResult:
    """How one episode went."""

    episode_id: str
    task_id: str
    env: str
    outcome: Outcome
    num_steps: int
    judgement: Judgement | None
    policy_version: int
    reusable_env: bool = True
    """False when the env may be mid-step (timeout, error): the pool replaces it."""
    error: str | None = None


class EpisodeRunner:
    """Runs episodes with one policy, publishing every event through ``publisher``."""

    def __init__(
        self,
        publisher: Publisher,
        policy: Policy,
        *,
        guard: Guard | None = None,
        timeout_s: float | None = None,
    ) -> None:
        self.publisher = publisher
        self.policy = policy
        self.guard = guard
        self.timeout_s = timeout_s

    async def run(
        self, env: Environment, task: Task, spec: TaskSpec, episode_id: str | None = None
    ) -> EpisodeResult:
        """Run ``spec`` in ``env`` (already built, not yet reset) to its end or timeout."""
        episode_id = episode_id or new_id()
        state = _EpisodeState(episode_id=episode_id, version=self.policy.version)
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._run(env, task, spec, state)
        except TimeoutError:
            return await self._end(
                task,
                state,
                Outcome.ABANDONED,
                None,
                reusable=False,
                error=f"episode exceeded {self.timeout_s}s",
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("episode %s of task %s failed", episode_id, task.task_id)
            return await self._end(
                task,
                state,
                Outcome.ERROR,
                None,
                reusable=False,
                error=f"{type(exc).__name__}: {exc}",
            )

    async def _call(self, env: Environment, fn: Any, *args: Any) -> Any:
        return await asyncio.to_thread(fn, *args) if env.blocking else fn(*args)

    async def _run(
        self, env: Environment, task: Task, spec: TaskSpec, state: _EpisodeState
    ) -> EpisodeResult:
        reset = await self._call(env, env.reset, spec, task.seed)
        injector: AttackInjector | None = make_injector(task.attack) if task.attack else None
        pending: Injection | None = None
        if injector is not None:
            reset, pending = injector.on_reset(env, reset)
        state.started = True
        await self.publisher.publish(
            EpisodeStarted(
                episode_id=state.episode_id,
                task_id=task.task_id,
                env=env.name,
                group_id=task.group_id,
                policy_name=self.policy.name,
                policy_version=self.policy.version,
                seed=task.seed,
                prompt=reset.prompt,
                attack=task.attack,
                trace_id=task.trace_id,
            )
        )
        messages: list[ChatMessage] = list(reset.prompt)
        observation = reset.observation
        out = StepOutput(observation=observation)
        blocked_steps = 0
        for index in range(HARD_STEP_LIMIT):
            started = time.time()
            version = self.policy.version
            decision = await self.policy.act(
                PolicyInput(
                    messages=list(messages),
                    tools=reset.tools,
                    task=spec,
                    step_index=index,
                    seed=task.seed,
                    choices=reset.choices,
                )
            )
            version = int(decision.info.get("policy_version", version))  # type: ignore[call-overload]
            action = env.resolve(decision.action)
            policy_ms = (time.time() - started) * 1000
            verdict = None
            if self.guard is not None:
                verdict = await self.guard.check(
                    ProposedAction(
                        episode_id=state.episode_id,
                        env=env.name,
                        task_id=task.task_id,
                        step_index=index,
                        action=action,
                        messages=list(messages),
                    )
                )
            env_started = time.time()
            blocked = verdict is not None and not verdict.allow
            if blocked:
                assert verdict is not None
                text = f"blocked by guard: {verdict.reason or 'not allowed'}"
                blocked_steps += 1  # the env never sees these, so it cannot truncate them
                out = StepOutput(
                    observation=text, tool_result=text, truncated=blocked_steps >= spec.max_steps
                )
            else:
                out = await self._call(env, env.step, action)
            injection, pending = pending, None
            if injector is not None and not blocked:
                out, made = injector.on_step(index, env, out)
                if made is not None and made.location == "tool_result":
                    injection = made
                elif made is not None:
                    pending = made
            added = [decision.message]
            if action.tool_call is not None:
                added.append(
                    ChatMessage(
                        role="tool",
                        tool_call_id=action.tool_call.id,
                        content=out.tool_result or out.observation,
                    )
                )
            elif not out.terminated and out.observation:
                added.append(ChatMessage(role="user", content=out.observation))
            messages.extend(added)
            await self.publisher.publish(
                Step(
                    episode_id=state.episode_id,
                    step_index=index,
                    env=env.name,
                    task_id=task.task_id,
                    group_id=task.group_id,
                    policy_version=version,
                    observation=observation,
                    action=action,
                    tool_result=out.tool_result,
                    messages=added,
                    token_ids=decision.token_ids,
                    logprobs=decision.logprobs,
                    prompt_token_ids=decision.prompt_token_ids,
                    injection=injection,
                    reward=out.reward,
                    blocked=blocked,
                    block_reason=verdict.reason if blocked and verdict else None,
                    timing=Timing(
                        started_at=started,
                        policy_ms=policy_ms,
                        env_ms=(time.time() - env_started) * 1000,
                    ),
                    info=out.info,
                    trace_id=task.trace_id,
                )
            )
            state.steps, state.version = index + 1, version
            observation = out.observation
            if out.terminated or out.truncated:
                break
        judgement = await self._call(env, env.judge)
        if judgement.success:
            outcome = Outcome.SUCCESS
        elif not out.terminated:
            outcome = Outcome.TRUNCATED
        else:
            outcome = Outcome.FAILURE
        return await self._end(task, state, outcome, judgement)

    async def _end(
        self,
        task: Task,
        state: _EpisodeState,
        outcome: Outcome,
        judgement: Judgement | None,
        *,
        reusable: bool = True,
        error: str | None = None,
    ) -> EpisodeResult:
        if not state.started:  # failed before it began: still a well-formed episode
            await self.publisher.publish(
                EpisodeStarted(
                    episode_id=state.episode_id,
                    task_id=task.task_id,
                    env=task.env,
                    group_id=task.group_id,
                    policy_name=self.policy.name,
                    policy_version=state.version,
                    seed=task.seed,
                    attack=task.attack,
                    trace_id=task.trace_id,
                )
            )
        await self.publisher.publish(
            EpisodeEnded(
                episode_id=state.episode_id,
                task_id=task.task_id,
                env=task.env,
                group_id=task.group_id,
                outcome=outcome,
                task_reward=judgement.reward if judgement else 0.0,
                safety=judgement.safety if judgement else None,
                num_steps=state.steps,
                policy_version=state.version,
                trace_id=task.trace_id,
            )
        )
        return EpisodeResult(
            episode_id=state.episode_id,
            task_id=task.task_id,
            env=task.env,
            outcome=outcome,
            num_steps=state.steps,
            judgement=judgement,
            policy_version=state.version,
            reusable_env=reusable,
            error=error,
        )


@dataclass
class _EpisodeState:
    episode_id: str
    version: int
    steps: int = 0
    started: bool = False
