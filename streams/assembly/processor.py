"""The faust-streaming processor around the fold: ``safactory worker assemble``.

It reads ``sf.steps``, ``sf.episodes`` and ``sf.verdicts`` (co-partitioned by episode id),
folds each event in, and emits trajectories to ``sf.trajectories`` keyed by group id with
``sf-policy-version`` = the oldest version in the trajectory (the codec stamps it), and
abandon events to ``sf.episodes``. A timer drives verdict and episode timeouts.

Open episodes and recently closed ones are written through to a compacted state topic
(``<prefix>assembler-state``) and read back before a restarted worker starts, so folds
resume. (Not a faust table: faust-streaming 0.15's changelog recovery hung on restart in
our tests.) One assembler instance per deployment: it restores every episode's state.
Records that cannot be decoded go to ``sf.dlq``. Outputs and state changes are
acknowledged by the broker before the input counts as processed (at-least-once); output
ids are deterministic, so a re-emission after a crash is recognisable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, MutableMapping
from typing import Any, TypeVar

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition

from ...infra.config import Settings
from ...infra.topics import TopicSpec, create_topics
from ...schemas import DeadLetter, DecodeError, Event, codec
from ..app import make_app
from .fold import AssemblerConfig, EpisodeState, TrajectoryAssembler

SOURCES = ("steps", "episodes", "verdicts")
V = TypeVar("V")


STATE_TOPIC = TopicSpec(
    "assembler-state", "open:<episode> | closed:<episode>",
    "the assembler's open and recently closed episodes", cleanup="compact", partitions=1,
)  # fmt: skip
"""Compacted topic holding the fold's state: the latest value per key wins, None deletes."""


class _Recorded(MutableMapping[str, V]):
    """A dict that records every change as a (key, value-or-None) state record."""

    def __init__(self, kind: str, data: dict[str, V], pending: list, dump: Any) -> None:
        self.kind, self.data, self.pending, self.dump = kind, data, pending, dump

    def __getitem__(self, key: str) -> V:
        return self.data[key]

    def __setitem__(self, key: str, value: V) -> None:
        self.data[key] = value
        self.pending.append((f"{self.kind}:{key}".encode(), self.dump(value)))

    def __delitem__(self, key: str) -> None:
        del self.data[key]
        self.pending.append((f"{self.kind}:{key}".encode(), None))

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.data))

    def __len__(self) -> int:
        return len(self.data)


async def restore_state(settings: Settings) -> tuple[dict[str, EpisodeState], dict[str, float]]:
    """Read the state topic to its end: open episodes and recently closed ones."""
    await create_topics(settings, [STATE_TOPIC])
    topic = settings.topic(STATE_TOPIC.name)
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap, group_id=None,
                                enable_auto_commit=False)  # fmt: skip
    latest: dict[bytes, bytes | None] = {}
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        if not parts:
            parts = [TopicPartition(topic, 0)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for record in records:
                    latest[record.key] = record.value
    finally:
        await consumer.stop()
    states: dict[str, EpisodeState] = {}
    closed: dict[str, float] = {}
    for key, value in latest.items():
        kind, _, episode = key.decode().partition(":")
        if value is None:
            continue
        if kind == "open":
            states[episode] = EpisodeState.load(value)
        elif kind == "closed":
            closed[episode] = float(value)
    return states, closed


def build_assembler_app(
    settings: Settings,
    config: AssemblerConfig | None = None,
    *,
    name: str = "assemble",
    tick_every_s: float = 1.0,
    restored: tuple[dict[str, EpisodeState], dict[str, float]] | None = None,
) -> tuple[faust.App, TrajectoryAssembler]:
    """The faust app of the assembler, and the fold it drives (for stats).

    ``restored`` is the state read by :func:`restore_state` before the app starts.
    """
    datadir = settings.home / "faust" / name
    datadir.mkdir(parents=True, exist_ok=True)
    # a restarted worker rejoins its group within seconds, not faust's default minute
    app = make_app(name, settings, datadir=str(datadir), broker_session_timeout=10.0,
                   broker_rebalance_timeout=20.0, broker_heartbeat_interval=1.0)  # fmt: skip
    source = app.topic(*(settings.topic(t) for t in SOURCES))
    state_topic = app.topic(settings.topic(STATE_TOPIC.name))
    pending: list[tuple[bytes, bytes | None]] = []
    opened, closed = restored or ({}, {})
    assembler = TrajectoryAssembler(
        config,
        _Recorded("open", opened, pending, lambda state: state.dump()),
        _Recorded("closed", closed, pending, lambda at: repr(at).encode()),
    )
    outputs = {
        "trajectories": app.topic(settings.topic("trajectories")),
        "episodes": app.topic(settings.topic("episodes")),
    }
    dlq = app.topic(settings.topic("dlq"))

    async def emit(events: list[Event]) -> None:
        """Send outputs, then the state changes behind them; wait for every ack. Outputs go
        first: a crash in between re-emits the same ids rather than losing an output."""
        sent = []
        for out in events:
            record = codec.encode(out)
            sent.append(await outputs[out.TOPIC].send(
                key=record.key, value=record.value, headers=record.headers
            ))  # fmt: skip
        await asyncio.gather(*sent)
        latest = dict(pending)  # one record per key: the last change wins
        pending.clear()
        await asyncio.gather(*[await state_topic.send(key=k, value=v) for k, v in latest.items()])

    @app.agent(source, concurrency=1)
    async def assemble(stream: faust.StreamT) -> None:
        async for event in stream.events():
            message = event.message
            headers = list(message.headers or [])
            try:
                decoded = codec.decode(message.value, headers)
            except DecodeError as exc:
                wire = DeadLetter.wire_headers(
                    headers, f"decode: {exc}", message.topic, message.partition, message.offset
                )
                await (await dlq.send(key=message.key, value=message.value, headers=wire))
                continue
            await emit(assembler.apply(decoded, time.time()))

    @app.timer(interval=tick_every_s)
    async def timeouts() -> None:
        await emit(assembler.tick(time.time()))

    return app, assembler
