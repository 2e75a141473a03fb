"""1,000 generated malformed records interleaved with good ones: every bad one lands in the
dead-letter topic with a reason, every good one reaches the handler in order, and the
consumer never dies."""

from __future__ import annotations

import asyncio
import json
import random

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from topic_records import collect

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.processor import Context, Processor, Runtime
from safactory.infra.producer import EventProducer
from safactory.schemas import headers as h

pytestmark = pytest.mark.integration

N_BAD = 1000
N_GOOD = 600
EPISODES = ("ep-a", "ep-b", "ep-c")

# Values that no lax coercion can turn into the field's type.
NOT_INT = st.one_of(
    st.text(alphabet="abcxyz", min_size=1),
    st.lists(st.integers(), max_size=2),
    st.floats(0.1, 0.9),
    st.just(None),
)
NOT_STR = st.one_of(
    st.integers(),
    st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def good_step(episode: str, index: int, produced_at: float | None = None) -> s.Step:
    extra = {} if produced_at is None else {"produced_at": produced_at}
    return s.Step(
        episode_id=episode,
        step_index=index,
        env="os",
        task_id="t",
        policy_version=2,
        action=s.Action(text=f"echo {index}"),
        **extra,
    )


@st.composite
def malformed(draw: st.DrawFn) -> tuple[str, bytes | None, list[tuple[str, bytes]]]:
    """(kind, value, headers) of a record that must fail to decode."""
    base = s.encode(good_step("ep-bad", draw(st.integers(0, 10_000)), produced_at=1.8e9))
    payload = json.loads(base.value)
    hdrs = list(base.headers)
    kind = draw(
        st.sampled_from(
            ["json", "type", "missing", "huge", "extra", "header", "tombstone", "mismatch"]
        )
    )
    if kind == "json":
        cut = draw(st.integers(1, len(base.value) - 1))
        junk = draw(st.binary(max_size=40).filter(lambda b: not b.strip().startswith(b"{")))
        value = draw(st.sampled_from([base.value[:cut], junk or b"\x00", b"{'single': 1}"]))
        return kind, value, hdrs
    if kind == "type":
        field = draw(
            st.sampled_from(
                ["step_index", "policy_version", "env", "episode_id", "task_id", "action"]
            )
        )
        if field in ("step_index", "policy_version"):
            payload[field] = draw(NOT_INT)
        elif field == "action":
            payload[field] = draw(st.one_of(st.integers(), st.text(max_size=5)))
        else:
            payload[field] = draw(NOT_STR)
        return kind, json.dumps(payload).encode(), hdrs
    if kind == "missing":
        for field in draw(
            st.lists(
                st.sampled_from(["episode_id", "step_index", "env", "task_id", "policy_version"]),
                min_size=1,
            )
        ):
            payload.pop(field, None)
        return kind, json.dumps(payload).encode(), hdrs
    if kind == "huge":
        field = draw(st.sampled_from(["env", "event_id", "episode_id", "task_id"]))
        payload[field] = "x" * draw(st.integers(200, 200_000))
        return kind, json.dumps(payload).encode(), hdrs
    if kind == "extra":
        payload[draw(st.text(alphabet="qwz_", min_size=3, max_size=8))] = draw(st.integers())
        return kind, json.dumps(payload).encode(), hdrs
    if kind == "tombstone":
        return kind, None, hdrs
    if kind == "mismatch":
        name = draw(st.sampled_from([h.POLICY_VERSION, h.EPISODE, h.ENV]))
        wrong = {h.POLICY_VERSION: b"99", h.EPISODE: b"someone-else", h.ENV: b"qa"}[name]
        return kind, base.value, [(k, wrong if k == name else v) for k, v in hdrs]
    # kind == "header": the contract itself is broken
    bad = draw(
        st.sampled_from(
            [
                "drop-schema",
                "unknown-schema",
                "bad-version",
                "negative",
                "dup",
                "non-utf8",
                "bad-time",
            ]
        )
    )
    edits = {
        "drop-schema": [x for x in hdrs if x[0] != h.SCHEMA],
        "unknown-schema": [(k, b"stepp/1" if k == h.SCHEMA else v) for k, v in hdrs],
        "bad-version": [(k, b"v2" if k == h.POLICY_VERSION else v) for k, v in hdrs],
        "negative": [(k, b"-1" if k == h.POLICY_VERSION else v) for k, v in hdrs],
        "dup": [*hdrs, (h.SCHEMA, b"step/1")],
        "non-utf8": [(k, b"\xc3\x28" if k == h.EPISODE else v) for k, v in hdrs],
        "bad-time": [(k, b"yesterday" if k == h.PRODUCED_AT else v) for k, v in hdrs],
    }
    return kind, base.value, edits[bad]


def generate_malformed(n: int) -> list[tuple[str, bytes | None, list[tuple[str, bytes]]]]:
    """Draw ``n`` malformed records with hypothesis (derandomised: the same every run)."""
    out: list[tuple[str, bytes | None, list[tuple[str, bytes]]]] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(malformed())
    def collect(record: tuple[str, bytes | None, list[tuple[str, bytes]]]) -> None:
        out.append(record)

    collect()
    return out


def test_generated_records_really_are_malformed() -> None:
    records = generate_malformed(N_BAD)
    assert len(records) >= N_BAD
    assert {kind for kind, _, _ in records} >= {
        "json",
        "type",
        "missing",
        "huge",
        "header",
        "tombstone",
        "mismatch",
        "extra",
    }
    for _, value, hdrs in records:
        with pytest.raises(s.DecodeError):
            s.decode(value, hdrs)


async def publish_mixed(topics: Settings, producer: EventProducer) -> tuple[int, list[s.Step]]:
    """N_BAD malformed records shuffled among good steps (each episode's in index order);
    returns (records published, the good steps)."""
    bad = generate_malformed(N_BAD)[:N_BAD]
    rng = random.Random(7)
    goods = [good_step(ep, i) for i in range(N_GOOD // len(EPISODES)) for ep in EPISODES]
    plan: list[object] = [*bad, *goods]
    rng.shuffle(plan)
    # Keep each episode's good steps in index order after the shuffle.
    queues = {ep: iter([g for g in goods if g.episode_id == ep]) for ep in EPISODES}
    plan = [next(queues[p.episode_id]) if isinstance(p, s.Step) else p for p in plan]

    steps_topic = topics.topic("steps")
    futures = []
    for item in plan:
        if isinstance(item, s.Step):
            futures.append(await producer.send(item))
        else:
            _, value, hdrs = item
            futures.append(
                await producer.send_raw(steps_topic, key=b"ep-bad", value=value, headers=hdrs)
            )
    for f in futures:
        await f
    return len(plan), goods


async def dead_letters_of(topics: Settings, group: str) -> list[s.DeadLetter]:
    """The ``N_BAD`` dead letters ``group`` sent, checked for reason and origin."""
    records = await collect(topics, topics.topic("dlq"), lambda rs: len(rs) >= N_BAD, 30)
    letters = [s.DeadLetter.from_record(r.key, r.value, r.headers) for r in records]
    assert len(letters) == N_BAD
    for letter in letters:
        assert letter.error.startswith("decode: ") and len(letter.error) > 10
        assert letter.origin_topic == topics.topic("steps") and letter.origin_offset >= 0
        assert letter.origin_group == group
    return letters


async def test_bad_records_go_to_dlq_good_ones_arrive_in_order(
    topics: Settings, producer: EventProducer
) -> None:
    published, goods = await publish_mixed(topics, producer)
    seen: dict[str, list[int]] = {ep: [] for ep in EPISODES}

    async def handle(d: Delivery) -> None:
        assert isinstance(d.event, s.Step)
        seen[d.event.episode_id].append(d.event.step_index)

    async with EventConsumer(["steps"], "dlq-test", handler=handle, settings=topics) as consumer:
        while consumer.stats.received < published:
            await consumer.poll_once(timeout_ms=3000)
        dead_lettered, handled = consumer.stats.dead_lettered, consumer.stats.handled
        # The consumer is still alive and handles what comes next.
        await producer.publish(good_step("ep-a", 10_000))
        while seen["ep-a"][-1] != 10_000:
            await consumer.poll_once(timeout_ms=3000)

    assert dead_lettered == N_BAD
    assert handled == len(goods)
    for ep in EPISODES:
        expected = [g.step_index for g in goods if g.episode_id == ep]
        assert seen[ep][: len(expected)] == expected

    letters = await dead_letters_of(topics, "dlq-test")
    # The original bytes are kept: nothing is lost.
    bad = generate_malformed(N_BAD)[:N_BAD]
    assert sorted((v or b"") for _, v, _ in bad) == sorted((x.value or b"") for x in letters)


@pytest.mark.parametrize("per_record", [True, False], ids=["record-handler", "batch-handler"])
async def test_a_processor_dead_letters_what_does_not_decode_and_commits_past_it(
    topics: Settings, producer: EventProducer, per_record: bool
) -> None:
    """The runtime decodes a record handler's records one at a time as it handles them
    (a batch handler's at fetch): either way every bad record is dead-lettered before the
    batch's offsets are committed, and every good one is handled once, in order."""
    published, goods = await publish_mixed(topics, producer)
    seen: dict[str, list[int]] = {ep: [] for ep in EPISODES}

    def note(d: Delivery) -> None:
        assert isinstance(d.event, s.Step)
        seen[d.event.episode_id].append(d.event.step_index)

    async def handle(d: Delivery, ctx: Context) -> None:
        note(d)

    async def handle_batch(ds: list[Delivery], ctx: Context) -> None:
        for d in ds:
            note(d)

    processor = Processor(
        "decode-test",
        inputs=("steps",),
        **({"handle": handle} if per_record else {"handle_batch": handle_batch}),  # type: ignore[arg-type]
    )
    runtime = Runtime(topics, processor, worker="audit")
    async with asyncio.timeout(60):
        await runtime.serve(idle_timeout=3.0)  # returns once nothing came for 3 s
    consumer = runtime.consumer()
    assert consumer.stats.dead_lettered == N_BAD
    assert consumer.stats.handled == len(goods)
    for ep in EPISODES:
        assert seen[ep] == [g.step_index for g in goods if g.episode_id == ep]
    await dead_letters_of(topics, topics.group("decode-test"))
    admin = AIOKafkaAdminClient(bootstrap_servers=topics.kafka_bootstrap)
    await admin.start()
    try:
        committed = await admin.list_consumer_group_offsets(topics.group("decode-test"))
    finally:
        await admin.close()
    assert sum(m.offset for m in committed.values()) == published  # past the bad ones too


async def test_failing_handler_dead_letters_and_goes_on(
    topics: Settings, producer: EventProducer
) -> None:
    await producer.publish_many([good_step("ep-h", i) for i in range(5)])
    handled: list[int] = []

    async def handle(d: Delivery) -> None:
        assert isinstance(d.event, s.Step)
        if d.event.step_index == 2:
            raise RuntimeError("checker exploded")
        handled.append(d.event.step_index)

    async with EventConsumer(["steps"], "fail-test", handler=handle, settings=topics) as consumer:
        while consumer.stats.received < 5:
            await consumer.poll_once(timeout_ms=3000)
        assert handled == [0, 1, 3, 4]
        assert consumer.stats.dead_lettered == 1
        assert consumer.stats.reasons == {"handler": 1}


async def test_each_group_dead_letters_its_own_copy_and_says_so(
    topics: Settings, producer: EventProducer
) -> None:
    steps_topic = topics.topic("steps")
    await producer.send_raw(steps_topic, key=b"ep-x", value=b"{not json", headers=[])
    groups = [topics.group(name) for name in ("audit", "assemble", "safactory-sink")]

    async def ignore(d: Delivery) -> None:
        pass

    for group in groups:
        async with EventConsumer(["steps"], group, handler=ignore, settings=topics) as consumer:
            while consumer.stats.dead_lettered < 1:
                await consumer.poll_once(timeout_ms=3000)
    records = await collect(topics, topics.topic("dlq"), lambda rs: len(rs) >= len(groups), 30)
    letters = [s.DeadLetter.from_record(r.key, r.value, r.headers) for r in records]
    assert {(x.origin_topic, x.origin_offset) for x in letters} == {(steps_topic, 0)}
    assert sorted(x.origin_group or "" for x in letters) == sorted(groups)
    assert all(h.ORIGIN_GROUP not in dict(x.headers) for x in letters)
