"""Following a deployment's topics into a :class:`~.view.LiveView`.

One group-less ``TopicReader`` (a watcher commits nothing and never joins a worker's group)
reads ``sf.steps``, ``sf.verdicts``, ``sf.alerts``, ``sf.episodes`` and ``sf.control`` (the
episodes paused for approval) from their ends, or
from their beginnings on request. :meth:`Follower.start` returns once every partition's
start offset is pinned, so a record published after it returns is shown. Consumer-group lag
is read every few seconds with the admin client, and the policy topic through the shared
:class:`~safactory.infra.policy_watch.PolicyWatcher`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiokafka import ConsumerRecord
from aiokafka.admin import AIOKafkaAdminClient

from ...infra.config import Settings
from ...infra.policy_watch import PolicyWatcher
from ...infra.reader import Decoder, TopicReader
from ...infra.topics import BY_NAME, admin_client, create_topics
from ...schemas import Alert, Control, EpisodeEnded, EpisodeStarted, Verdict
from ...schemas import headers as h
from .lag import LagReader
from .view import LiveView

log = logging.getLogger(__name__)

FOLLOWED = ("steps", "verdicts", "alerts", "episodes", "control")
"""Catalogue topics the view is folded from."""


class Follower:
    """Feeds ``view`` from the topics of ``settings`` until stopped."""

    def __init__(
        self,
        settings: Settings,
        view: LiveView,
        *,
        from_beginning: bool = False,
        lag_every_s: float = 3.0,
    ) -> None:
        self.settings = settings
        self.view = view
        self.from_beginning = from_beginning
        self.lag_every_s = lag_every_s
        self._prefix_len = len(settings.topic_prefix)
        self._consumer: TopicReader | None = None
        self._admin: AIOKafkaAdminClient | None = None
        self._watcher: PolicyWatcher | None = None
        self._decoder = Decoder("monitor")
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, timeout_s: float = 30.0) -> None:
        """Create missing topics, connect, pin every partition's start offset, and take the
        first lag and policy readings: once it returns ("live"), what arrives is only
        folded and drawn (starting the other clients meanwhile delayed a first alert by
        0.6 s on a busy machine)."""
        settings = self.settings
        await create_topics(settings, [BY_NAME[name] for name in (*FOLLOWED, "policy")])
        consumer = self._consumer = TopicReader(settings, "monitor", committed_only=False)
        await consumer.start()
        async with asyncio.timeout(timeout_s):
            parts = await consumer.partitions(
                [settings.topic(name) for name in FOLLOWED], wait_s=timeout_s
            )
            await consumer.open(parts, start="beginning" if self.from_beginning else "end")
        self._admin = admin_client(settings, "monitor-admin")
        await self._admin.start()
        self._watcher = PolicyWatcher(settings)
        await self._watcher.start(catch_up_s=10.0)
        lag = LagReader(settings, self._admin, consumer)
        await self._read_lag(lag)
        self._read_policies(self._watcher)
        self._tasks = [
            asyncio.create_task(self._poll(consumer), name="monitor-poll"),
            asyncio.create_task(self._lag(lag), name="monitor-lag"),
            asyncio.create_task(self._policies(self._watcher), name="monitor-policies"),
        ]
        self.view.set_status("live")

    async def stop(self) -> None:
        """Stop following and disconnect."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
        if self._admin is not None:
            with contextlib.suppress(Exception):
                await self._admin.close()
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()

    async def __aenter__(self) -> Follower:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _poll(self, consumer: TopicReader) -> None:
        try:
            while True:
                for record in await consumer.read(timeout_ms=100):
                    self._fold(record)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.view.set_status(f"stopped: {type(exc).__name__}: {exc}")
            raise

    def _fold(self, record: ConsumerRecord) -> None:
        view, at = self.view, record.timestamp / 1000.0
        if record.value is None:
            return
        if record.topic[self._prefix_len :] == "steps":
            version = h.header_value(record.headers, h.POLICY_VERSION)
            view.fold_step(
                record.value,
                h.header_value(record.headers, h.ENV),
                int(version) if version and version.isdigit() else None,
                at,
            )
            return
        event = self._decoder.decode(record)
        if event is None:
            view.totals["undecodable"] += 1
        elif isinstance(event, Alert):
            view.fold_alert(event, at)
        elif isinstance(event, Verdict):
            view.fold_verdict(event, at)
        elif isinstance(event, EpisodeStarted | EpisodeEnded):
            view.fold_episode(event, at)
        elif isinstance(event, Control):
            view.fold_control(event, at)

    async def _read_lag(self, reader: LagReader) -> None:
        try:
            self.view.set_lag(await reader.read())
        except Exception as exc:  # a slow or restarting broker: keep the last reading
            log.warning("monitor: consumer-group lag not read: %r", exc)

    async def _lag(self, reader: LagReader) -> None:
        while True:
            await asyncio.sleep(self.lag_every_s)
            await self._read_lag(reader)

    def _read_policies(self, watcher: PolicyWatcher) -> None:
        self.view.set_policies(
            {
                name: {
                    "version": p.policy_version,
                    "trained_on": p.trained_on,
                    "produced_at": p.produced_at,
                    "trainer_version": p.trainer_version,
                    "reload_error": p.reload_error,
                }
                for name, p in sorted(watcher.latest.items())
            }
        )

    async def _policies(self, watcher: PolicyWatcher) -> None:
        while True:
            await asyncio.sleep(1.0)
            self._read_policies(watcher)
