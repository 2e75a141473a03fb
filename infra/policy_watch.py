"""The one view of the compacted policy topic: the latest announcement per policy name.

Simulation workers read it before admitting an episode (hot reload when they lag), the
trainer's followers wait on it for a version. It reads every partition from the
beginning with no consumer group (a view commits nothing: each start rebuilds it from the
compacted log), then follows live in the background. Versions only go forward: an older
announcement arriving late does not replace a newer one; a tombstone (a record with no
value) forgets its policy.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka import ConsumerRecord

from ..schemas import PolicyVersion
from .config import Settings
from .reader import Decoder, TopicFollower, TopicReader
from .topics import BY_NAME, create_topics

log = logging.getLogger(__name__)


class PolicyWatcher(TopicFollower):
    """``latest[name]`` is the newest :class:`PolicyVersion` announced for ``name``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topic(PolicyVersion.TOPIC)
        self.latest: dict[str, PolicyVersion] = {}
        self._reader = TopicReader(settings, "policy-watcher", committed_only=False)
        self._decoder = Decoder("policy-watcher")
        self._read = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def start(self, catch_up_s: float = 30.0) -> None:
        """Connect, read the announcements made so far (up to ``catch_up_s``, so the first
        question already gets the latest version), then follow in the background."""
        await create_topics(self.settings, [BY_NAME[PolicyVersion.TOPIC]])
        await self._open(self.topic)
        self._follow_in_background(self._follow(), "policy-watcher")
        if not await self._caught_up(catch_up_s):
            log.warning("policy watcher: not caught up with %s after %gs", self.topic, catch_up_s)

    async def wait_for(self, name: str, at_least: int) -> PolicyVersion:
        """The announcement of ``name`` once its version is ``>= at_least`` (bound the wait
        with ``asyncio.timeout``)."""
        async with self._read:
            await self._read.wait_for(lambda: self._at_least(name, at_least) or not self._alive())
        if not self._at_least(name, at_least):
            raise RuntimeError(f"policy watcher on {self.topic} was stopped")
        return self.latest[name]

    def _at_least(self, name: str, version: int) -> bool:
        known = self.latest.get(name)
        return known is not None and known.policy_version >= version

    async def _follow(self) -> None:
        try:
            while True:
                for record in await self._reader.read(timeout_ms=500):
                    self._fold(record)
                async with self._read:
                    self._read.notify_all()
        finally:  # waiters see that nothing more will come (see _alive)
            async with self._read:
                self._read.notify_all()

    def _alive(self) -> bool:
        """Whether the view still follows; raises what stopped it if it failed."""
        if self._task is None or not self._task.done():
            return True
        if not self._task.cancelled() and self._task.exception() is not None:
            raise RuntimeError(
                f"policy watcher on {self.topic} stopped: {self._task.exception()!r}"
            )
        return False

    @property
    def undecodable(self) -> int:
        """Records read that did not decode."""
        return self._decoder.undecodable

    def _fold(self, record: ConsumerRecord) -> None:
        if record.value is None:
            if record.key is not None:
                self.latest.pop(record.key.decode(errors="replace"), None)
            return
        event = self._decoder.decode(record)
        if not isinstance(event, PolicyVersion):
            return
        known = self.latest.get(event.policy_name)
        if known is None or event.policy_version >= known.policy_version:
            self.latest[event.policy_name] = event

    async def _caught_up(self, timeout_s: float) -> bool:
        """Whether every record on the topic at the call was read within ``timeout_s``."""
        return await self._reader.caught_up(timeout_s)
