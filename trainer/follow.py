"""Following policy announcements on the compacted policy topic (hot reload, vLLM reload).

A local policy hot-reloads by waiting here for a newer version and loading its ``uri``
(after checking ``sha256``); a vLLM server is driven by the same announcement.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

from ..infra.config import Settings
from ..schemas import DecodeError, PolicyVersion, codec


class PolicyWatcher:
    """Keeps the latest announced :class:`PolicyVersion` of one policy."""

    def __init__(self, settings: Settings, policy_name: str) -> None:
        self.policy_name = policy_name
        self.latest: PolicyVersion | None = None
        self.undecodable = 0
        self._consumer = AIOKafkaConsumer(
            settings.topic(PolicyVersion.TOPIC),
            bootstrap_servers=settings.kafka_bootstrap,
            client_id=f"{settings.client_id}-policy-watcher",
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )

    async def start(self) -> None:
        """Connect and read from the beginning of the compacted topic."""
        await self._consumer.start()

    async def stop(self) -> None:
        """Disconnect."""
        await self._consumer.stop()

    async def __aenter__(self) -> PolicyWatcher:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def poll(self, timeout_ms: int = 100) -> PolicyVersion | None:
        """Read what arrived; return the latest announcement of this policy so far."""
        batches = await self._consumer.getmany(timeout_ms=timeout_ms)
        for records in batches.values():
            for record in records:
                try:
                    event = codec.decode(record.value, record.headers)
                except DecodeError:
                    self.undecodable += 1
                    continue
                if (
                    isinstance(event, PolicyVersion)
                    and event.policy_name == self.policy_name
                    and (self.latest is None or event.policy_version >= self.latest.policy_version)
                ):
                    self.latest = event
        return self.latest

    async def wait_for(self, at_least: int) -> PolicyVersion:
        """Block until a version ``>= at_least`` is announced (bound it with asyncio.timeout)."""
        while self.latest is None or self.latest.policy_version < at_least:
            await self.poll()
        return self.latest
