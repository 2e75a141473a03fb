"""The policy contract: given the chat so far and the tools, propose the next action.

A policy is shared by concurrent episodes, so :meth:`Policy.act` gets everything about the
episode in a :class:`PolicyInput` and keeps no per-episode state. It reports the version of
its weights; :meth:`Policy.reload` moves it to an announced version (hot reload).
:meth:`Policy.prompt` says what prompt it acts on, given the environment's (experience
injection adds lessons there: :mod:`safactory.agents.skills`).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from ...schemas import Action, ChatMessage, PolicyVersion, ToolSchema
from ..env import TaskSpec


@dataclass(frozen=True)
class PolicyInput:
    """What a policy sees at one step of one episode."""

    messages: list[ChatMessage]
    tools: list[ToolSchema]
    task: TaskSpec
    step_index: int
    seed: int = 0
    choices: list[str] = field(default_factory=list)
    """The environment's menu, if its action space is one (:attr:`ResetOutput.choices`)."""


@dataclass(frozen=True)
class PolicyOutput:
    """The proposed action, the assistant turn that carries it, and, when the policy
    generated tokens itself, their ids and behaviour logprobs."""

    action: Action
    message: ChatMessage
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None
    info: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Prompt:
    """The turns an episode starts from, and the ids of the skills rendered into them."""

    messages: list[ChatMessage]
    skills: list[str] = field(default_factory=list)


class PolicyError(RuntimeError):
    """A policy could not produce an action; the message says why."""


class Policy(abc.ABC):
    """Base of every policy."""

    name: str = "policy"
    version: int = 0
    """Version of the weights that produce the actions (``sf-policy-version``)."""

    @abc.abstractmethod
    async def act(self, inp: PolicyInput) -> PolicyOutput:
        """Propose the next action."""

    async def prompt(self, messages: list[ChatMessage], task: TaskSpec, env: str) -> Prompt:
        """The prompt this policy acts on, given the environment's ``messages`` for ``task``
        in ``env`` (the runner publishes it in ``EpisodeStarted``): by default those."""
        return Prompt(list(messages))

    async def reload(self, announcement: PolicyVersion) -> None:
        """Move to announced weights. Policies without weights just adopt the version."""
        self.version = announcement.policy_version

    async def close(self) -> None:  # noqa: B027 - policies without resources need nothing
        """Release clients, models and the like."""


def assistant_message(action: Action) -> ChatMessage:
    """The assistant turn (OpenAI format) that carries ``action``."""
    calls = [action.tool_call] if action.tool_call is not None else None
    return ChatMessage(role="assistant", content=action.text, tool_calls=calls)
