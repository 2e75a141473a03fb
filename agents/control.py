"""Obeying ``sf.control``: halt, pause for approval, or block the next action of an episode.

The runner asks a :class:`ControlSource` about its episode before the policy acts and again
before the action runs, and obeys the latest decision (:func:`obey`): ``halt`` ends the
episode (outcome ``halted``, naming the verdicts), ``pause`` waits for a person's ``resume``
(go on) or ``halt`` (deny), ``block_action`` blocks the next action only. The command line
wires :class:`ControlFollower` (the topic, followed without a consumer group) in.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Literal, Protocol

from ..infra.config import Settings
from ..infra.reader import Decoder, TopicFollower, TopicReader
from ..infra.topics import BY_NAME, create_topics
from ..schemas import Control, ControlCommand


class ControlSource(Protocol):
    """Where an episode's control decisions come from."""

    def latest(self, episode_id: str) -> Control | None:
        """The newest decision about ``episode_id`` seen so far."""
        ...

    async def changed(self, episode_id: str, since: Control | None) -> Control | None:
        """Wait until the newest decision about ``episode_id`` is no longer ``since``."""
        ...


@dataclass(frozen=True)
class Obeyed:
    """What the runner does before an action: ``run`` it, ``block`` it, or ``halt``."""

    do: Literal["run", "block", "halt"]
    control: Control | None = None
    waited_s: float = 0.0
    """How long a pause held the action."""


async def obey(
    source: ControlSource, episode_id: str, handled: set[str], approval_timeout_s: float
) -> Obeyed:
    """The decision for the next action of ``episode_id``. ``handled`` holds the ids of the
    one-shot decisions already obeyed (a ``block_action`` blocks one action); a pause not
    answered within ``approval_timeout_s`` is denied (halt)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    control = source.latest(episode_id)
    while control is not None and control.command is ControlCommand.PAUSE:
        left = approval_timeout_s - (loop.time() - started)
        try:
            async with asyncio.timeout(max(0.0, left)):
                control = await source.changed(episode_id, control)
        except TimeoutError:
            return Obeyed("halt", control, loop.time() - started)
    waited = loop.time() - started
    if control is None or control.event_id in handled:
        return Obeyed("run", control, waited)
    if control.command is ControlCommand.HALT:
        return Obeyed("halt", control, waited)
    handled.add(control.event_id)
    if control.command is ControlCommand.BLOCK_ACTION:
        return Obeyed("block", control, waited)
    return Obeyed("run", control, waited)  # resume: approved


class ControlFollower(TopicFollower):
    """The latest decision per episode on ``sf.control``, followed from the topic's end at
    :meth:`start` (decisions about episodes not yet started cannot exist)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topic(Control.TOPIC)
        self.decisions: dict[str, Control] = {}
        self._changed = asyncio.Condition()
        self._reader = TopicReader(settings, "control-follower", committed_only=False)
        self._decoder = Decoder("control-follower")

    def latest(self, episode_id: str) -> Control | None:
        return self.decisions.get(episode_id)

    async def changed(self, episode_id: str, since: Control | None) -> Control | None:
        async with self._changed:
            await self._changed.wait_for(lambda: self.decisions.get(episode_id) is not since)
        return self.decisions.get(episode_id)

    async def start(self) -> None:
        """Pin every partition at its end, then follow in the background."""
        await create_topics(self.settings, [BY_NAME[Control.TOPIC]])
        await self._open(self.topic, start="end")
        self._follow_in_background(self._follow(), "control-follower")

    async def _follow(self) -> None:
        while True:
            records = await self._reader.read(timeout_ms=200)
            for _, event in self._decoder(records):
                if isinstance(event, Control):
                    self.decisions[event.episode_id] = event
            if records:
                async with self._changed:
                    self._changed.notify_all()
