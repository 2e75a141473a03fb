"""Three KRaft nodes, replication 3, min.insync.replicas 2: SIGKILL the leader of a steps
partition while a producer sends; every acknowledged step is on the topic afterwards."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from loopback_ports import free_ports
from topic_records import everything

from safactory import schemas as s
from safactory.infra.cluster import LocalCluster
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, admin_client, create_topics

pytestmark = pytest.mark.integration

N_EVENTS = 4000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A fresh 3-node cluster (jars from the shared cache, data under a name of its own)."""
    home = Settings().home
    nodes = LocalCluster(home, name=f"chaos-test-{tmp_path.name}", base_port=free_ports(6))
    try:
        nodes.up()
        yield nodes
    finally:
        nodes.remove()


async def _describe_steps(settings: Settings) -> dict[int, dict]:
    admin = admin_client(settings)
    await admin.start()
    try:
        meta = await admin.describe_topics([settings.topic("steps")])
        configs = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, settings.topic("steps"))]
        )
    finally:
        await admin.close()
    entries = {e[0]: e[1] for e in configs[0].resources[0][4]}
    partitions = {p["partition"]: p for p in meta[0]["partitions"]}
    min_isr = entries.get("min.insync.replicas")  # None: the node asked lacks the topic yet
    return {"min_isr": None if min_isr is None else int(min_isr), "partitions": partitions}


async def _describe_steps_once_led(settings: Settings, timeout_s: float = 30.0) -> dict[int, dict]:
    """:func:`_describe_steps` once every partition of the new topic has a leader and its
    configuration is known: topic creation returns when the controller accepted it, before
    every node's metadata shows all its partitions (described too early, partition 0 can be
    missing, or the node answering has no configuration for the topic yet)."""
    expected = BY_NAME["steps"].partitions or settings.default_partitions
    async with asyncio.timeout(timeout_s):
        while True:
            described = await _describe_steps(settings)
            led = [p for p in described["partitions"].values() if p["leader"] >= 0]
            if len(led) == expected and described["min_isr"] is not None:
                return described
            await asyncio.sleep(0.2)


async def test_acknowledged_steps_survive_killing_the_partition_leader(
    cluster: LocalCluster,
) -> None:
    settings = Settings(kafka_bootstrap=cluster.bootstrap, topic_prefix="leader-kill.")
    await create_topics(settings, [BY_NAME["steps"]])
    described = await _describe_steps_once_led(settings)
    assert described["min_isr"] == 2
    assert all(len(p["replicas"]) == 3 for p in described["partitions"].values())
    leader = cluster.node(described["partitions"][0]["leader"])
    events = [
        s.Step(episode_id=f"ep-{i % 9}", step_index=i, env="os", task_id="t", policy_version=1)
        for i in range(N_EVENTS)
    ]

    async def kill_leader() -> None:
        await asyncio.sleep(1.0)
        await asyncio.to_thread(leader.kill)

    acked: list[str] = []
    failed: list[str] = []
    async with EventProducer(settings, request_timeout_ms=60_000, retry_backoff_ms=200) as out:
        killer = asyncio.create_task(kill_leader())
        pending = []
        for event in events:
            pending.append((event.event_id, await out.send(event)))
            await asyncio.sleep(0.0005)
        for event_id, future in pending:
            try:
                await future
                acked.append(event_id)
            except Exception as exc:
                failed.append(f"{type(exc).__name__}: {exc}")
        await killer
    after = await _describe_steps(settings)
    assert after["partitions"][0]["leader"] != leader.node_id, "the leader was not replaced"

    counts: Counter[str] = Counter()
    for record in await everything(settings, settings.topic("steps")):
        counts[s.codec.decode(record.value, record.headers).event_id] += 1
    lost = [i for i in acked if i not in counts]
    print(f"acked {len(acked)}, failed {len(failed)}, on topic {len(counts)}, lost {len(lost)}")
    assert not failed, failed[:3]
    assert lost == []
    assert max(counts.values()) == 1, "a step was written twice"
