"""Experience injection: lessons distilled from earlier episodes, put into the system prompt.

The skills worker distils lessons from unsafe and failed trajectories onto ``sf.skills``;
a :class:`SkillfulPolicy` retrieves the ``k`` most similar to the task from a
:class:`SkillSource` (the command line wires one that follows the topic) and renders them
into the prompt's system turn. The runner asks the policy for its prompt
(:meth:`Policy.prompt`) before the episode starts and publishes that prompt, with the ids of
the skills in it, in ``EpisodeStarted`` — so the auditor, the assembler, the trainer and a
replay all see the prompt the policy acted on, not the environment's bare one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from ..schemas import ChatMessage, PolicyVersion, Skill
from .env import TaskSpec
from .policies.base import Policy, PolicyInput, PolicyOutput, Prompt

HEADER = "Lessons from earlier episodes:"


class SkillSource(Protocol):
    """Where skills come from (``streams.skills.SkillLibrary`` fed from ``sf.skills``)."""

    def top_k(self, task_text: str, k: int = 3, env: str | None = None) -> list[Skill]:
        """Up to ``k`` skills relevant to a task's text (none when none is)."""
        ...


def render_for_prompt(skills: Sequence[Skill]) -> str:
    """Skills as a block for an agent's system prompt (empty when there are none)."""
    if not skills:
        return ""
    return "\n".join([HEADER, *(f"- {s.title}: {s.lesson}" for s in skills)])


def inject(messages: Sequence[ChatMessage], skills: Sequence[Skill]) -> list[ChatMessage]:
    """``messages`` with the rendered skills at the end of the first system turn (a system
    turn is put first if there is none)."""
    block = render_for_prompt(skills)
    out = list(messages)
    if not block:
        return out
    for i, message in enumerate(out):
        if message.role == "system" and isinstance(message.content, str | None):
            text = f"{message.content}\n\n{block}" if message.content else block
            out[i] = message.model_copy(update={"content": text})
            return out
    return [ChatMessage(role="system", content=block), *out]


class SkillfulPolicy(Policy):
    """``inner`` acting on prompts that carry the ``k`` skills most similar to the task."""

    def __init__(self, inner: Policy, source: SkillSource, k: int) -> None:
        self.inner, self.source, self.k = inner, source, k

    @property  # type: ignore[override]
    def name(self) -> str:
        """The inner policy's name (the trainer announces versions under it)."""
        return self.inner.name

    @property  # type: ignore[override]
    def version(self) -> int:
        """The inner policy's weights version."""
        return self.inner.version

    @version.setter
    def version(self, value: int) -> None:
        self.inner.version = value

    async def prompt(self, messages: list[ChatMessage], task: TaskSpec, env: str) -> Prompt:
        """The inner policy's prompt with the skills for ``task`` in its system turn."""
        base = await self.inner.prompt(messages, task, env)
        skills = await asyncio.to_thread(self.source.top_k, task.instruction, self.k, env)
        return Prompt(inject(base.messages, skills), [*base.skills, *(s.skill_id for s in skills)])

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        return await self.inner.act(inp)

    async def reload(self, announcement: PolicyVersion) -> None:
        await self.inner.reload(announcement)

    async def close(self) -> None:
        await self.inner.close()
