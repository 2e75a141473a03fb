"""Stop the broker while a producer is sending and start it again: every acknowledged
event is readable afterwards exactly once."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter

import pytest
from topic_records import everything

from safactory import schemas as s
from safactory.infra.broker import LocalBroker
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, create_topics

pytestmark = pytest.mark.integration

N_EVENTS = 3000


@pytest.fixture
def own_broker(settings: Settings):
    """A second broker on other ports that this test may kill and restart."""
    broker = LocalBroker(
        settings.home,
        port=19192,
        controller_port=19193,
        heap="512m",
        kafka_version=settings.kafka_version,
        name="restart-test-broker",
    )
    broker.kill()
    shutil.rmtree(broker.dir, ignore_errors=True)
    broker.up()
    yield broker
    broker.kill()
    shutil.rmtree(broker.dir, ignore_errors=True)


@pytest.mark.parametrize("how", ["kill", "graceful"])
async def test_acknowledged_events_survive_broker_restart(
    settings: Settings, own_broker: LocalBroker, how: str
) -> None:
    cfg = settings.model_copy(update={"kafka_bootstrap": own_broker.bootstrap})
    await create_topics(cfg, [BY_NAME["steps"]])
    events = [
        s.Step(episode_id=f"ep-{i % 7}", step_index=i, env="os", task_id="t", policy_version=1)
        for i in range(N_EVENTS)
    ]

    async def bounce() -> None:
        await asyncio.sleep(0.5)
        await asyncio.to_thread(own_broker.kill if how == "kill" else own_broker.down)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(own_broker.up)

    acked: list[str] = []
    failed = 0
    async with EventProducer(cfg, request_timeout_ms=60_000, retry_backoff_ms=200) as producer:
        restart = asyncio.create_task(bounce())
        pending = []
        for event in events:
            pending.append((event.event_id, await producer.send(event)))
            await asyncio.sleep(0.0005)
        for event_id, future in pending:
            try:
                await future
                acked.append(event_id)
            except Exception:
                failed += 1
        await restart

    print(f"{how}: acked={len(acked)} failed={failed}")
    assert len(acked) == N_EVENTS, f"only {len(acked)} acknowledged, {failed} failed"
    counts: Counter[str] = Counter()
    for r in await everything(cfg, cfg.topic("steps")):
        counts[s.decode(r.value, r.headers).event_id] += 1
    missing = [e for e in acked if counts[e] == 0]
    duplicated = [e for e, n in counts.items() if n > 1]
    assert not missing, f"{len(missing)} acknowledged events were lost"
    assert not duplicated, f"{len(duplicated)} events were written twice"


def test_cluster_ids_never_start_with_a_dash() -> None:
    from safactory.infra.broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(5000)]  # about 78 would start with '-' by chance
    assert not [i for i in ids if i.startswith("-")] and len(set(ids)) == len(ids)
