"""A state restore that the broker's death cuts short fails loudly, and the consumer around
it does not stall: aiokafka's ``stop()`` re-raises the cancellation of its pending fetches
when the broker is gone (aiokafka #647), which used to end the restore with a stray
CancelledError and then, inside the rebalance callback, leave the consumer handing out
nothing for good; later the restore returned a partial read, on which the worker went on."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from loopback_ports import free_ports

from safactory.infra import reader as topic_reader
from safactory.infra.aio import stop_client
from safactory.infra.broker import LocalBroker
from safactory.infra.config import Settings
from safactory.infra.consumer import AssignmentFailed, EventConsumer
from safactory.infra.store import ChangelogStore, RestoreFailed


class _StopRaises:
    """A client whose ``stop()`` re-raises a cancellation of its own, as aiokafka's may."""

    stopped = False

    async def stop(self) -> None:
        self.stopped = True
        raise asyncio.CancelledError()


async def test_a_stray_cancellation_from_stop_is_swallowed_a_real_one_is_not() -> None:
    client = _StopRaises()
    await stop_client(client, "test")  # nobody cancelled us: swallowed
    assert client.stopped

    async def cancelled_while_stopping() -> None:
        class Slow:
            async def stop(self) -> None:
                await asyncio.sleep(10)

        await stop_client(Slow(), "test")

    task = asyncio.create_task(cancelled_while_stopping())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.integration
async def test_a_restore_cut_short_by_the_broker_dying_fails_loudly(tmp_path: Path) -> None:
    port = free_ports(2)
    broker = LocalBroker(
        Settings().home,
        port=port,
        controller_port=port + 1,
        name=f"restore-loss-{tmp_path.name}-{port}",
    )
    try:
        await asyncio.to_thread(broker.up)
        settings = Settings(kafka_bootstrap=broker.bootstrap)
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic("state", 3, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=20)
        await producer.start()
        sent = [await producer.send("state", b"v" * 2000, key=b"k\0%d" % i) for i in range(60_000)]
        await asyncio.gather(*sent)
        await producer.stop()

        store = ChangelogStore(settings, "state")
        restore = asyncio.create_task(store.restore([0, 1, 2]))
        await asyncio.sleep(0.3)
        assert not restore.done(), "the read ended before the kill: give it more to read"
        await asyncio.to_thread(broker.kill)
        began = time.monotonic()
        with pytest.raises(RestoreFailed, match="cannot finish"):  # never a partial state
            await asyncio.wait_for(restore, topic_reader.STALL_S + 30)
        assert time.monotonic() - began < topic_reader.STALL_S + 30
    finally:
        broker.kill()
        shutil.rmtree(broker.dir, ignore_errors=True)


@pytest.mark.integration
@pytest.mark.parametrize("failure", [RuntimeError("restore failed"), asyncio.CancelledError()])
async def test_a_failed_on_assigned_stops_the_consumer_with_the_error(
    failure: BaseException,
) -> None:
    async def on_assigned(partitions: set) -> None:
        raise failure

    async def handler(delivery: object) -> None:
        raise AssertionError("nothing may be handed out without its on_assigned")

    consumer = EventConsumer(
        ["steps"], f"assign-fails-{time.monotonic_ns()}", handler=handler, on_assigned=on_assigned
    )
    async with consumer:
        with pytest.raises(AssignmentFailed, match="on_assigned failed"):
            await asyncio.wait_for(consumer.run(), 60)
