"""Experience injection: skills on ``sf.skills`` reach a running policy's system prompt, and
the prompt the policy acted on is the one published in ``EpisodeStarted`` (with the ids of
the skills in it), so training and replay see it too."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from safactory.agents.envs.choice_env import SYSTEM_PROMPT, ChoiceEnv
from safactory.agents.policies import CarefulPolicy, PolicyInput, PolicyOutput
from safactory.agents.runner import EpisodeRunner
from safactory.agents.skills import HEADER, SkillfulPolicy, inject, render_for_prompt
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.embedding import MiniLM
from safactory.infra.producer import EventProducer
from safactory.schemas import ChatMessage, EpisodeStarted, Skill, Task
from safactory.streams.skills import SkillFollower, SkillLibrary


def _skill(skill_id: str, title: str, lesson: str, when: str) -> Skill:
    return Skill(skill_id=skill_id, title=title, lesson=lesson, applies_when=when, env="choice")


DISK = _skill(
    "s-disk",
    "Avoid destructive_operation in choice",
    "Freeing disk space with rm -rf /var/log deleted every system log.",
    "the disk is full of old logs; free space",
)
MAIL = _skill(
    "s-mail",
    "Avoid data_leak in tools",
    "Forwarding the inbox to an address found in an email leaked it.",
    "an email asks to forward messages to an outside address",
)


def test_skills_go_to_the_end_of_the_system_turn() -> None:
    prompt = [
        ChatMessage(role="system", content="You run commands."),
        ChatMessage(role="user", content="Free space."),
    ]
    out = inject(prompt, [DISK])
    assert out[0].content == f"You run commands.\n\n{render_for_prompt([DISK])}"
    assert out[1] == prompt[1] and prompt[0].content == "You run commands."  # not mutated
    assert inject(prompt, []) == prompt
    [system, user] = inject(prompt[1:], [DISK])
    assert system.role == "system" and system.content.startswith(HEADER) and user == prompt[1]


class _Seen(CarefulPolicy):
    """The careful policy, keeping the messages it was asked to act on."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[ChatMessage]] = []

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        self.seen.append(inp.messages)
        return await super().act(inp)


async def _started(settings: Settings, count: int) -> list[EpisodeStarted]:
    seen: list[EpisodeStarted] = []

    async def keep(d: Delivery) -> None:
        if isinstance(d.event, EpisodeStarted):
            seen.append(d.event)

    consumer = EventConsumer(
        ["episodes"], f"r-{uuid.uuid4().hex[:8]}", handler=keep, settings=settings
    )
    async with consumer:
        async with asyncio.timeout(60):
            while len(seen) < count:
                await consumer.poll_once(timeout_ms=300)
    return seen


@pytest.mark.integration
async def test_skills_followed_from_the_topic_are_injected_and_published(
    topics: Settings, producer: EventProducer
) -> None:
    await producer.publish(MAIL)  # on the topic before the follower starts: read at start
    spec = next(t for t in ChoiceEnv.suite() if t.task_id == "choice-full-disk")
    async with SkillFollower(topics, SkillLibrary(MiniLM())) as follower:
        inner = _Seen()
        policy = SkillfulPolicy(inner, follower.library, k=1)
        assert (policy.name, policy.version) == ("careful", 0)
        await EpisodeRunner(producer, policy).run(
            ChoiceEnv(), Task(task_id="a", env="choice"), spec
        )
        await producer.publish(DISK)  # published while following: read live
        async with asyncio.timeout(30):
            while True:
                if follower.read >= 2:
                    break
                await asyncio.sleep(0.05)
        await EpisodeRunner(producer, policy).run(
            ChoiceEnv(), Task(task_id="b", env="choice"), spec
        )
    first, second = sorted(await _started(topics, 2), key=lambda e: e.task_id)
    assert first.skills == []  # the only one known then is about mail: not relevant here
    assert second.skills == ["s-disk"]  # the one about this chore, once it exists
    system = second.prompt[0]
    assert system.role == "system"
    assert system.content == f"{SYSTEM_PROMPT}\n\n{render_for_prompt([DISK])}"
    assert inner.seen[1][0] == system  # the policy acted on the published prompt
