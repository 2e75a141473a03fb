"""The topic catalogue of DESIGN.md, declared once and created idempotently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError, for_code

from .broker import min_insync_replicas
from .config import Settings

log = logging.getLogger(__name__)

DAY_MS = 24 * 3600 * 1000
FOREVER = -1


@dataclass(frozen=True)
class TopicSpec:
    """One catalogue topic: its short name (``steps``), layout and retention."""

    name: str
    key: str
    description: str
    cleanup: str = "delete"
    retention_ms: int = 7 * DAY_MS
    partitions: int | None = None
    max_message_bytes: int = 8 * 1024 * 1024
    extra: dict[str, str] = field(default_factory=dict)

    def configs(self) -> dict[str, str]:
        """Kafka topic configs for this spec."""
        cfg = {
            "cleanup.policy": self.cleanup,
            "max.message.bytes": str(self.max_message_bytes),
            "retention.ms": str(self.retention_ms),
        }
        if self.cleanup == "compact":
            cfg.pop("retention.ms")
            cfg.update(COMPACTED)
        cfg.update(self.extra)
        return cfg


COMPACTED = {
    "min.compaction.lag.ms": "0",
    "segment.ms": str(10 * 60_000),
    "segment.bytes": str(64 * 1024 * 1024),
    "min.cleanable.dirty.ratio": "0.2",
    "delete.retention.ms": str(10 * 60_000),
}
"""Configs of every compacted topic: segments roll every 10 minutes or 64 MB, so the log
cleaner, which never touches the active segment, can compact them (with Kafka's 1 GB
segments a state topic here grew to 291 MB for 53 MB of input and was never compacted);
tombstones stay 10 minutes for readers that restore meanwhile."""


CATALOGUE: tuple[TopicSpec, ...] = (
    TopicSpec("tasks", "task id", "work for simulation workers", retention_ms=7 * DAY_MS),
    TopicSpec("steps", "episode id", "one record per agent step", retention_ms=FOREVER),
    TopicSpec("episodes", "episode id", "episode started / ended", retention_ms=FOREVER),
    TopicSpec(
        "verdicts", "episode id", "checker verdicts per step and episode", retention_ms=FOREVER
    ),
    TopicSpec(
        "alerts", "episode id", "verdicts at or above alert severity", retention_ms=7 * DAY_MS
    ),
    TopicSpec(
        "trajectories",
        "group id",
        "reward-complete trajectories to train on",
        retention_ms=14 * DAY_MS,
    ),
    TopicSpec("scores", "episode id", "data-value scores", retention_ms=30 * DAY_MS),
    TopicSpec(
        "skills",
        "skill id",
        "distilled lessons for experience injection",
        cleanup="compact",
        partitions=1,
    ),
    TopicSpec(
        "policy", "policy name", "policy version announcements", cleanup="compact", partitions=1
    ),
    TopicSpec(
        "control", "episode id", "halt / pause / guard decisions to agents", retention_ms=1 * DAY_MS
    ),
    TopicSpec(
        "labels", "episode id", "people's safe / unsafe labels of episodes", retention_ms=FOREVER
    ),
    TopicSpec(
        "dlq",
        "original key",
        "records that failed to decode or validate",
        retention_ms=FOREVER,
        max_message_bytes=16 * 1024 * 1024,
    ),
)

BY_NAME = {spec.name: spec for spec in CATALOGUE}


def admin_client(settings: Settings, name: str = "admin") -> AIOKafkaAdminClient:
    """An admin client for the configured cluster (caller starts and closes it); ``name``
    ends its client id."""
    return AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap, client_id=f"{settings.client_id}-{name}"
    )


async def wait_for_broker(
    settings: Settings, wait_s: float | None = None, *, quiet: bool = False
) -> None:
    """Return once the cluster answers; retry every 2 s for up to ``wait_s`` (default
    ``settings.broker_wait_s``) while it does not (logged unless ``quiet``), then raise its
    ``KafkaConnectionError``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (settings.broker_wait_s if wait_s is None else wait_s)
    while True:
        admin = admin_client(settings)
        try:
            await admin.start()
            return
        except KafkaConnectionError as exc:
            if loop.time() >= deadline:
                raise
            if not quiet:
                log.warning(
                    "broker %s not reachable (%s); retrying for up to %.0f s more",
                    settings.kafka_bootstrap,
                    exc,
                    deadline - loop.time(),
                )
            await asyncio.sleep(2.0)
        finally:
            await admin.close()


async def create_topics(
    settings: Settings, specs: Iterable[TopicSpec] = CATALOGUE
) -> dict[str, bool]:
    """Create the catalogue topics that do not exist yet. Returns name → created now."""
    specs = list(specs)
    admin = admin_client(settings)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        todo = [s for s in specs if settings.topic(s.name) not in existing]
        if todo:
            replication = replication_factor(await admin.describe_cluster())
            durability = {"min.insync.replicas": str(min_insync_replicas(replication))}
            new = [
                NewTopic(
                    settings.topic(s.name),
                    s.partitions or settings.default_partitions,
                    replication,
                    topic_configs={**s.configs(), **durability},
                )
                for s in todo
            ]
            response = await admin.create_topics(new)
            for entry in response.topic_errors:
                name, code = entry[0], entry[1]
                error = for_code(code)
                if code and error is not TopicAlreadyExistsError:
                    raise error(f"creating topic {name}: {entry[2] if len(entry) > 2 else ''}")
            await _until_led(admin, [t.name for t in new])
        created = {settings.topic(s.name) for s in todo}
        return {settings.topic(s.name): settings.topic(s.name) in created for s in specs}
    finally:
        await admin.close()


async def _until_led(admin: AIOKafkaAdminClient, names: list[str], wait_s: float = 30.0) -> None:
    """Wait until every partition of the just created ``names`` has a leader. The broker
    answers CreateTopics before it elects them; a consumer that subscribes meanwhile is
    assigned none of the topic's partitions and sees them only at its next metadata refresh
    (five minutes by default), so a processor reading a topic it owns would miss it."""
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        described = await admin.describe_topics(names)
        if all(
            not t["error_code"]
            and t["partitions"]
            and all(not p["error_code"] and p["leader"] >= 0 for p in t["partitions"])
            for t in described
        ):
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"topics without a leader after {wait_s:.0f} s: {names}")
        await asyncio.sleep(0.1)


async def delete_topics_where(settings: Settings, doomed: Callable[[str], bool]) -> list[str]:
    """Delete every topic of the cluster whose name ``doomed`` accepts; returns the names."""
    admin = admin_client(settings)
    await admin.start()
    try:
        names = sorted(t for t in await admin.list_topics() if doomed(t))
        if names:
            await admin.delete_topics(names)
        return names
    finally:
        await admin.close()


def retention_text(retention_ms: int | None) -> str:
    """A retention as ``topics list`` shows it: ``-`` (none: compacted), ``forever`` or days."""
    if retention_ms is None:
        return "-"
    return "forever" if retention_ms == FOREVER else f"{int(retention_ms) // DAY_MS}d"


async def describe_topics(settings: Settings) -> list[dict[str, object]]:
    """Partitions and leader of each catalogue topic as the cluster reports it."""
    admin = admin_client(settings)
    await admin.start()
    try:
        names = [settings.topic(s.name) for s in CATALOGUE]
        existing = set(await admin.list_topics())
        meta = await admin.describe_topics([n for n in names if n in existing])
        by_name = {t["topic"]: t for t in meta}
        out = []
        for spec in CATALOGUE:
            name = settings.topic(spec.name)
            topic = by_name.get(name)
            out.append(
                {
                    "topic": name,
                    "exists": topic is not None,
                    "partitions": len(topic["partitions"]) if topic else 0,
                    "cleanup": spec.cleanup,
                    "retention_ms": spec.retention_ms if spec.cleanup == "delete" else None,
                    "key": spec.key,
                    "description": spec.description,
                }
            )
        return out
    finally:
        await admin.close()


def replication_factor(cluster: dict[str, object]) -> int:
    """Replicas per partition: 3 on a cluster of three or more brokers, else 1."""
    brokers = cluster.get("brokers") or []
    return 1 if len(brokers) < 3 else 3  # type: ignore[arg-type]
