"""Which episodes of one run ended: the observer of ``simulate run`` (and of a replay's
re-run), not a stream processor."""

from __future__ import annotations

from ..infra.config import Settings
from ..infra.reader import Decoder, TopicMissing, TopicReader
from ..schemas import EpisodeEnded
from .env import EnvError


class EpisodeTracker:
    """Counts ``EpisodeEnded`` events of one run group on ``sf.episodes``, from the end of
    the topic at :meth:`start` on (a group-less ``TopicReader``: positions are exact,
    whichever worker runs the episodes).

    Why no consumer group: every partition must be pinned at its end offset when
    :meth:`start` returns, before the run's tasks are published; a group joins later, in the
    background, and a new group's "latest" is taken at the join, so the first episodes of a
    fast run would be missed. It commits nothing, keeps no state and dead-letters nothing:
    the auditor and the assembler read ``sf.episodes`` in their groups and dead-letter bad
    records there (a record it cannot decode is not one of this run's ends)."""

    def __init__(self, settings: Settings, group_id: str) -> None:
        self.settings = settings
        self.group_id = group_id
        self.topic = settings.topic("episodes")
        self.ended: list[EpisodeEnded] = []
        self._reader = TopicReader(settings, "episode-tracker")
        self._decoder = Decoder("episode-tracker")

    async def start(self) -> None:
        """Pin every partition at its current end (the client is closed if that fails)."""
        await self._reader.start()
        try:
            try:
                parts = await self._reader.partitions([self.topic])
            except TopicMissing:
                raise EnvError(
                    f"topic {self.topic} does not exist; run `safactory topics create`"
                ) from None
            await self._reader.open(parts, start="end")
        except BaseException:
            await self._reader.stop()
            raise

    async def poll(self, timeout_ms: int = 200) -> list[EpisodeEnded]:
        """New episode ends of this group since the last poll."""
        new = []
        for _, event in self._decoder(await self._reader.read(timeout_ms=timeout_ms)):
            if isinstance(event, EpisodeEnded) and event.group_id == self.group_id:
                new.append(event)
        self.ended.extend(new)
        return new

    async def stop(self) -> None:
        """Disconnect."""
        await self._reader.stop()
