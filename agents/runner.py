"""The episode runner: one episode of one task, every step published before the next.

Order of events on the wire for an episode: ``EpisodeStarted``, then each ``Step`` (acked
by the cluster before the agent moves on, stamped with the ``sf-policy-version`` of the
weights that chose its action; the environment judges the episode while its last step is
being acked), then ``EpisodeEnded`` with the environment's own judgement of task success
and safety. All three are keyed by the episode id, so they stay in order
in one partition.

With a :class:`~.control.ControlSource` the runner obeys ``sf.control`` between steps and
before an action runs: a halted episode ends with outcome ``halted`` (naming the verdicts), a
paused one waits for a person's approval, a blocked action is not run. With an
:class:`~.explore.Exploration` it checkpoints the environment before each action and, at the
first flagged one, runs branch episodes from that anchor once the episode ended
(:mod:`.explore`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from ..schemas import (
    ChatMessage,
    Control,
    ControlCommand,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Injection,
    Outcome,
    Step,
    Task,
    Timing,
    ToolSchema,
    new_id,
)
from .attacks import AttackInjector, make_injector
from .control import ControlSource, obey
from .env import Environment, Judgement, StepOutput, TaskSpec
from .explore import Exploration, Flagged, anchor_group, branch_id, branch_seed, flags
from .guard import Guard, ProposedAction
from .policies.base import Policy, PolicyInput

log = logging.getLogger(__name__)
T = TypeVar("T")
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
    branches: tuple[EpisodeResult, ...] = ()
    """The branch episodes explored from this one's flagged step (exploration)."""


class EpisodeRunner:
    """Runs episodes with one policy, publishing every event through ``publisher``."""

    def __init__(
        self,
        publisher: Publisher,
        policy: Policy,
        *,
        guard: Guard | None = None,
        timeout_s: float | None = None,
        control: ControlSource | None = None,
        approval_timeout_s: float = 300.0,
        exploration: Exploration | None = None,
    ) -> None:
        self.publisher = publisher
        self.policy = policy
        self.guard = guard
        self.timeout_s = timeout_s
        self.control = control
        self.approval_timeout_s = approval_timeout_s
        """A pause not approved within this long is denied (the episode halts)."""
        self.exploration = exploration

    async def run(
        self, env: Environment, task: Task, spec: TaskSpec, episode_id: str | None = None
    ) -> EpisodeResult:
        """Run ``spec`` in ``env`` (already built, not yet reset) to its end or timeout,
        then the branches of its flagged step, if exploring."""
        state = _EpisodeState(
            episode_id=episode_id or new_id(),
            version=self.policy.version,
            group_id=task.group_id,
            seed=task.seed,
        )
        result = await self._guarded(self._run(env, task, spec, state), task, state)
        if state.flagged is None or self.exploration is None:
            return result
        return await self._explore(env, task, spec, state, state.flagged, result)

    async def _guarded(self, walk: Any, task: Task, state: _EpisodeState) -> EpisodeResult:
        """Await one episode's walk within the timeout; a timeout or a failure still ends
        it (``abandoned`` / ``error``)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await walk
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
            log.exception("episode %s of task %s failed", state.episode_id, task.task_id)
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
        prompt = await self.policy.prompt(list(reset.prompt), spec, env.name)
        state.skills = prompt.skills
        await self._started(env, task, state, prompt.messages)
        walk = _Walk(list(prompt.messages), reset.observation, reset.tools, reset.choices)
        return await self._walk(env, task, spec, state, walk, injector, pending)

    async def _started(
        self, env: Environment, task: Task, state: _EpisodeState, prompt: list[ChatMessage]
    ) -> None:
        state.started = True
        await self.publisher.publish(
            EpisodeStarted(
                episode_id=state.episode_id,
                task_id=task.task_id,
                env=env.name,
                group_id=state.group_id,
                policy_name=self.policy.name,
                policy_version=self.policy.version,
                seed=state.seed,
                prompt=prompt,
                attack=task.attack if state.parent is None else None,
                skills=state.skills,
                parent_episode_id=state.parent[0] if state.parent else None,
                branch_step=state.parent[1] if state.parent else None,
                trace_id=task.trace_id,
            )
        )

    async def _walk(
        self,
        env: Environment,
        task: Task,
        spec: TaskSpec,
        state: _EpisodeState,
        walk: _Walk,
        injector: AttackInjector | None = None,
        pending: Injection | None = None,
    ) -> EpisodeResult:
        """The steps from ``walk.first_step`` to the episode's end, then its end."""
        messages, observation = walk.messages, walk.observation
        out = StepOutput(observation=observation)
        blocked_steps = 0
        handled: set[str] = set()
        exploring = self.exploration is not None and state.parent is None and task.attack is None
        for index in range(walk.first_step, HARD_STEP_LIMIT):
            halt = self._halted(state.episode_id)
            if halt is not None:  # decided while the last step ran: no further action
                return await self._halt(env, task, state, halt)
            started = time.time()
            version = self.policy.version
            decision = await self.policy.act(
                PolicyInput(
                    messages=list(messages),
                    tools=walk.tools,
                    task=spec,
                    step_index=index,
                    seed=state.seed,
                    choices=walk.choices,
                )
            )
            version = int(decision.info.get("policy_version", version))  # type: ignore[call-overload]
            action = env.resolve(decision.action)
            policy_ms = (time.time() - started) * 1000
            proposal = ProposedAction(
                episode_id=state.episode_id,
                env=env.name,
                task_id=task.task_id,
                step_index=index,
                action=action,
                messages=list(messages),
            )
            verdict = await self.guard.check(proposal) if self.guard is not None else None
            if exploring and state.flagged is None:
                await self._flag(env, proposal, verdict, state, walk, observation)
            told = block_reason = None  # what the agent is told, what the step records
            if verdict is not None and not verdict.allow:
                told = f"blocked by guard: {verdict.reason or 'not allowed'}"
                block_reason = verdict.reason
            if self.control is not None:
                obeyed = await obey(
                    self.control, state.episode_id, handled, self.approval_timeout_s
                )
                if obeyed.do == "halt":
                    assert obeyed.control is not None
                    return await self._halt(env, task, state, obeyed.control)
                if obeyed.do == "block" and told is None:
                    block_reason = f"control: {obeyed.control.reason if obeyed.control else ''}"
                    told = f"blocked by {block_reason}"
            env_started = time.time()
            blocked = told is not None
            if blocked:
                text = told or ""
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
            sending = self.publisher.publish(
                Step(
                    episode_id=state.episode_id,
                    step_index=index,
                    env=env.name,
                    task_id=task.task_id,
                    group_id=state.group_id,
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
                    block_reason=block_reason,
                    timing=Timing(
                        started_at=started,
                        policy_ms=policy_ms,
                        env_ms=(time.time() - env_started) * 1000,
                    ),
                    info=out.info,
                    choices=list(walk.choices) or None,
                    trace_id=task.trace_id,
                )
            )
            if out.terminated or out.truncated:  # judge the episode while its step is acked
                judgement = await _both(sending, self._call(env, env.judge))
                state.steps, state.version = state.steps + 1, version
                break
            await sending
            state.steps, state.version = state.steps + 1, version
            observation = out.observation
        else:
            judgement = await self._call(env, env.judge)
        if judgement.success:
            outcome = Outcome.SUCCESS
        elif not out.terminated:
            outcome = Outcome.TRUNCATED
        else:
            outcome = Outcome.FAILURE
        return await self._end(task, state, outcome, judgement)

    async def _flag(
        self,
        env: Environment,
        proposal: ProposedAction,
        verdict: Any,
        state: _EpisodeState,
        walk: _Walk,
        observation: str,
    ) -> None:
        """Keep the anchor before ``proposal`` if the guard or the flagger flags it."""
        assert self.exploration is not None
        found = [verdict] if verdict is not None and flags(verdict.decision) else []
        if not found and self.exploration.flagger is not None:
            judged = await self.exploration.flagger.check(proposal)
            found = [judged] if flags(judged.decision) else []
        if found:
            anchor = await self._call(env, env.checkpoint)
            reasons = [r for d in found for r in d.reasons]
            state.flagged = Flagged(
                proposal.step_index,
                anchor,
                list(walk.messages),
                observation,
                walk.tools,
                walk.choices,
                reasons,
            )

    async def _explore(
        self,
        env: Environment,
        task: Task,
        spec: TaskSpec,
        parent: _EpisodeState,
        flagged: Flagged,
        result: EpisodeResult,
    ) -> EpisodeResult:
        """Run the branches of ``flagged``, one after another; ``result`` with them."""
        assert self.exploration is not None
        children = await self._call(env, env.branch, flagged.anchor, self.exploration.branches)
        done = []
        for number, child in enumerate(children):
            state = _EpisodeState(
                episode_id=branch_id(parent.episode_id, flagged.step_index, number),
                version=self.policy.version,
                group_id=anchor_group(parent.episode_id, flagged.step_index),
                seed=branch_seed(parent.seed, number),
                skills=parent.skills,
                parent=(parent.episode_id, flagged.step_index),
            )
            try:
                done.append(
                    await self._guarded(
                        self._branch(child, task, spec, state, flagged), task, state
                    )
                )
            finally:
                await self._call(child, child.close)
        return replace(result, branches=tuple(done))

    async def _branch(
        self, env: Environment, task: Task, spec: TaskSpec, state: _EpisodeState, flagged: Flagged
    ) -> EpisodeResult:
        """One branch: from the anchor's state, its own sample of the flagged step on."""
        await self._started(env, task, state, list(flagged.messages))
        walk = _Walk(
            list(flagged.messages),
            flagged.observation,
            flagged.tools,
            flagged.choices,
            flagged.step_index,
        )
        return await self._walk(env, task, spec, state, walk)

    def _halted(self, episode_id: str) -> Control | None:
        """A halt decided for the episode, if one is in."""
        control = self.control.latest(episode_id) if self.control is not None else None
        return control if control is not None and control.command is ControlCommand.HALT else None

    async def _halt(
        self, env: Environment, task: Task, state: _EpisodeState, control: Control
    ) -> EpisodeResult:
        """End the episode as halted by ``control`` (the environment still judges it)."""
        judgement = await self._call(env, env.judge)
        return await self._end(
            task, state, Outcome.HALTED, judgement, halted_by=control.verdict_ids
        )

    async def _end(
        self,
        task: Task,
        state: _EpisodeState,
        outcome: Outcome,
        judgement: Judgement | None,
        *,
        reusable: bool = True,
        error: str | None = None,
        halted_by: list[str] | None = None,
    ) -> EpisodeResult:
        if not state.started:  # failed before it began: still a well-formed episode
            await self.publisher.publish(
                EpisodeStarted(
                    episode_id=state.episode_id,
                    task_id=task.task_id,
                    env=task.env,
                    group_id=state.group_id,
                    policy_name=self.policy.name,
                    policy_version=state.version,
                    seed=state.seed,
                    attack=task.attack if state.parent is None else None,
                    parent_episode_id=state.parent[0] if state.parent else None,
                    branch_step=state.parent[1] if state.parent else None,
                    trace_id=task.trace_id,
                )
            )
        await self.publisher.publish(
            EpisodeEnded(
                episode_id=state.episode_id,
                task_id=task.task_id,
                env=task.env,
                group_id=state.group_id,
                outcome=outcome,
                task_reward=judgement.reward if judgement else 0.0,
                safety=judgement.safety if judgement else None,
                num_steps=state.steps,
                policy_version=state.version,
                halted_by=halted_by or [],
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
class _Walk:
    """Where an episode's loop starts: the conversation so far and what the env offers."""

    messages: list[ChatMessage]
    observation: str
    tools: list[ToolSchema]
    choices: list[str]
    first_step: int = 0


@dataclass
class _EpisodeState:
    episode_id: str
    version: int
    group_id: str | None = None
    seed: int = 0
    steps: int = 0
    """Steps this episode published (a branch's start at its ``branch_step``)."""
    started: bool = False
    skills: list[str] = field(default_factory=list)
    parent: tuple[str, int] | None = None
    """A branch's parent episode and the step it branched at."""
    flagged: Flagged | None = None
    """The anchor before the first flagged action (exploration)."""


async def _both(first: Awaitable[Any], second: Awaitable[T]) -> T:
    """Await both at once; ``second``'s result. Neither is left running when one fails
    (the environment must not be handed back while a call still uses it)."""
    done, result = await asyncio.gather(first, second, return_exceptions=True)
    for outcome in (done, result):
        if isinstance(outcome, BaseException):
            raise outcome
    return result  # type: ignore[return-value]
