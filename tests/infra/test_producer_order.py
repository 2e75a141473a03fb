"""EventProducer keeps each partition in send order on the real broker: a batch that fails
takes the batches queued behind it on its partition down with it (nothing is written out
of order), and sends made after the failure was reported go through again; many concurrent
episodes publishing one step at a time each read back in their own order."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from aiokafka.errors import MessageSizeTooLargeError
from topic_records import collect

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import BY_NAME, create_topics

pytestmark = pytest.mark.integration

MIB = 1024 * 1024


def _step(episode: str, index: int) -> s.Step:
    return s.Step(episode_id=episode, step_index=index, env="os", task_id="t", policy_version=0)


async def _read_steps(settings: Settings, count: int) -> list[tuple[int, int, s.Step]]:
    """(partition, offset, step) of the first ``count`` records of the steps topic."""
    records = await collect(settings, settings.topic("steps"), lambda rs: len(rs) >= count, 30)
    out: list[tuple[int, int, s.Step]] = []
    for r in records:
        step = s.decode(r.value, r.headers)
        assert isinstance(step, s.Step)
        out.append((r.partition, r.offset, step))
    return out


async def test_a_failed_batch_fails_the_later_ones_of_its_partition_and_the_next_send_works(
    settings: Settings,
) -> None:
    # One partition that refuses records over 1 MiB: the broker fails that batch for good.
    small = dataclasses.replace(BY_NAME["steps"], partitions=1, max_message_bytes=MIB)
    await create_topics(settings, [small])
    topic = settings.topic("steps")
    async with EventProducer(settings, linger_ms=20) as producer:
        await producer.publish(_step("ep", 0))
        headers = s.encode(_step("ep", 1)).headers
        too_large = await producer.send_raw(
            topic, key=b"ep", value=b"x" * (2 * MIB), headers=headers
        )
        behind = [await producer.send(_step("ep", i)) for i in range(2, 6)]
        with pytest.raises(MessageSizeTooLargeError):
            await too_large
        outcomes = await asyncio.gather(*behind, return_exceptions=True)
        assert all(isinstance(o, Exception) for o in outcomes), outcomes
        # the caller has seen the failure: what it sends now is written, after step 0
        ack = await producer.publish(_step("ep", 6))
        assert producer.renewals == 1
    assert ack.offset == 1
    assert [(o, st.step_index) for _, o, st in await _read_steps(settings, 2)] == [(0, 0), (1, 6)]


async def test_concurrent_episodes_publishing_one_step_at_a_time_stay_in_order(
    topics: Settings, producer: EventProducer
) -> None:
    episodes, steps = 32, 15

    async def episode(e: int) -> list[int]:
        return [(await producer.publish(_step(f"ep-{e}", i))).offset for i in range(steps)]

    offsets = await asyncio.gather(*(episode(e) for e in range(episodes)))
    assert all(o == sorted(o) for o in offsets)
    records = await _read_steps(topics, episodes * steps)
    seen: dict[str, list[int]] = {}
    for _, _, step in sorted(records, key=lambda r: (r[0], r[1])):
        seen.setdefault(step.episode_id, []).append(step.step_index)
    assert seen == {f"ep-{e}": list(range(steps)) for e in range(episodes)}
    assert len({(p, o) for p, o, _ in records}) == episodes * steps
