"""Consumer-group lag of one deployment: committed offsets against the topics' end offsets.

A deployment's groups are scoped by its topic prefix (``Settings.group``: ``audit`` →
``audit-team1`` under ``team1.``). Under a non-default prefix only groups named
``<name>-<prefix>`` are read; under the default ``sf.`` prefix group names carry no mark,
so every group is asked once and those that commit nothing on the deployment's topics are
not asked again. Only partitions of the deployment's topics count.
"""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from ...infra.config import Settings
from ...infra.reader import TopicReader


class LagReader:
    """Reads the lag of every consumer group of the deployment on demand."""

    def __init__(
        self, settings: Settings, admin: AIOKafkaAdminClient, offsets: TopicReader
    ) -> None:
        self.settings = settings
        self.admin = admin
        self.offsets = offsets
        """A started reader, used only for its end-offset lookups."""
        self._foreign: set[str] = set()
        scope = settings.topic_prefix.strip(".")
        self._suffix = None if scope == "sf" else f"-{scope}"

    def _ours(self, group: str) -> bool:
        if group in self._foreign:
            return False
        return self._suffix is None or group.endswith(self._suffix)

    async def read(self) -> dict[str, dict[str, Any]]:
        """Group → ``{"lag": n, "topics": {topic: n}, "partitions": k}``, groups by name."""
        groups = sorted(g for g, *_ in await self.admin.list_consumer_groups() if self._ours(g))
        committed: dict[str, dict[TopicPartition, int]] = {}
        for group in groups:
            offsets = await self.admin.list_consumer_group_offsets(group)
            mine = {
                tp: meta.offset
                for tp, meta in offsets.items()
                if tp.topic.startswith(self.settings.topic_prefix) and meta.offset >= 0
            }
            if mine:
                committed[group] = mine
            elif self._suffix is None:
                self._foreign.add(group)
        wanted = {tp for offsets in committed.values() for tp in offsets}
        ends = await self.offsets.last_offsets(sorted(wanted)) if wanted else {}
        result: dict[str, dict[str, Any]] = {}
        for group, offsets in committed.items():
            topics: dict[str, int] = {}
            for tp, offset in offsets.items():
                short = tp.topic.removeprefix(self.settings.topic_prefix)
                topics[short] = topics.get(short, 0) + max(0, ends.get(tp, offset) - offset)
            result[group] = {
                "lag": sum(topics.values()),
                "topics": dict(sorted(topics.items())),
                "partitions": len(offsets),
            }
        return result
