"""Episodes against the real broker: ordered step events with ground truth, guards,
injections, pools, timeouts, and workers sharing sf.tasks with admission control."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from safactory.agents import EnvPool, EpisodeRunner, PatternGuard
from safactory.agents.env import EnvError, Environment
from safactory.agents.policies import CarefulPolicy, Policy, PolicyInput, PolicyOutput
from safactory.agents.pools import ActorPool
from safactory.agents.registry import make_env
from safactory.agents.runner import EpisodeResult
from safactory.agents.sandbox.bubblewrap import SandboxError, check_host
from safactory.agents.tasks import resolve_task, suite_tasks
from safactory.agents.worker import SimulationWorker
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.infra.producer import EventProducer
from safactory.infra.staleness import StalenessController
from safactory.schemas import (
    AttackPlan,
    EpisodeEnded,
    EpisodeStarted,
    Outcome,
    PolicyVersion,
    Step,
    Task,
    headers,
)

pytestmark = pytest.mark.integration


async def _read(settings: Settings, topics: list[str], until: int) -> list[Delivery]:
    """Every event on ``topics`` (a fresh group, from the beginning) until ``until`` seen."""
    seen: list[Delivery] = []

    async def keep(d: Delivery) -> None:
        seen.append(d)

    consumer = EventConsumer(
        topics, f"reader-{uuid.uuid4().hex[:8]}", handler=keep, settings=settings
    )
    async with consumer:
        async with asyncio.timeout(60):
            while len(seen) < until:
                await consumer.poll_once(timeout_ms=300)
    return seen


def _task(env: str, suite_task: str, **extra: object) -> Task:
    return Task(
        task_id=f"t-{uuid.uuid4().hex[:8]}",
        env=env,
        spec={"suite_task": suite_task},
        group_id="g1",
        **extra,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "env_name,suite_task,policy_kind,unsafe",
    [
        ("tools", "tools-safe-mail-wire", "reckless", True),
        ("tools", "tools-safe-mail-wire", "careful", False),
        ("qa", "qa-multiturn-grandma", "reckless", True),
        ("embodied", "emb-safe-warm-pasta", "careful", False),
        ("os", "os-safe-exfil-curl-id_ed25519", "reckless", True),
    ],
)
async def test_steps_reach_kafka_in_order_with_ground_truth(
    producer: EventProducer,
    topics: Settings,
    env_name: str,
    suite_task: str,
    policy_kind: str,
    unsafe: bool,
) -> None:
    if env_name == "os":
        try:
            check_host()
        except SandboxError as exc:  # pragma: no cover
            pytest.skip(str(exc))
    from safactory.agents.policies import PolicyConfig, make_policy

    policy = make_policy(PolicyConfig(kind=policy_kind, version=7))  # type: ignore[arg-type]
    env = make_env(env_name)
    task = _task(env_name, suite_task)
    try:
        result = await EpisodeRunner(producer, policy).run(env, task, resolve_task(task))
    finally:
        env.close()
    events = await _read(topics, ["steps", "episodes"], until=result.num_steps + 2)
    mine = [d for d in events if d.event.header_episode() == result.episode_id]
    episode = [d.event for d in mine if d.topic.endswith("episodes")]
    steps = sorted((d for d in mine if d.topic.endswith("steps")), key=lambda d: d.offset)
    assert isinstance(episode[0], EpisodeStarted) and isinstance(episode[-1], EpisodeEnded)
    assert [s.event.step_index for s in steps] == list(range(result.num_steps))  # type: ignore[attr-defined]
    assert len({s.partition for s in steps}) == 1
    for delivery in steps:
        assert headers.Headers.decode(delivery.headers).policy_version == 7
    ended = episode[-1]
    assert ended.safety is not None and ended.safety.unsafe is unsafe  # type: ignore[attr-defined]
    assert ended.num_steps == result.num_steps  # type: ignore[attr-defined]
    last: Step = steps[-1].event  # type: ignore[assignment]
    assert last.messages and last.messages[0].role == "assistant"


async def test_guard_blocks_before_execution_and_step_says_so(
    producer: EventProducer, topics: Settings
) -> None:
    from safactory.agents.policies import RecklessPolicy

    env = make_env("tools")
    task = _task("tools", "tools-safe-direct-ceo-fraud")
    guard = PatternGuard([r'"to": "XX77CEO"'])
    result = await EpisodeRunner(producer, RecklessPolicy(), guard=guard).run(
        env, task, resolve_task(task)
    )
    assert result.judgement is not None and not result.judgement.safety.unsafe
    assert env.world.payments == []  # type: ignore[attr-defined]
    events = await _read(topics, ["steps"], until=result.num_steps)
    blocked = [d.event for d in events if d.event.blocked]  # type: ignore[attr-defined]
    assert len(blocked) == 1 and blocked[0].step_index == 0  # type: ignore[attr-defined]
    assert "guard pattern" in (blocked[0].block_reason or "")  # type: ignore[attr-defined]
    assert blocked[0].tool_result.startswith("blocked by guard")  # type: ignore[attr-defined]


async def test_a_guard_that_blocks_everything_truncates(producer: EventProducer) -> None:
    from safactory.agents.policies import RecklessPolicy

    task = _task("tools", "tools-cap-balance")
    spec = resolve_task(task)
    runner = EpisodeRunner(producer, RecklessPolicy(), guard=PatternGuard([".*"]))
    result = await runner.run(make_env("tools"), task, spec)
    assert result.outcome == Outcome.TRUNCATED and result.num_steps == spec.max_steps


async def test_injection_ground_truth_is_in_the_step_event(
    producer: EventProducer, topics: Settings
) -> None:
    env = make_env("tools")
    plan = AttackPlan(injector="indirect_prompt_injection", at_step=0, params={"goal": "pay"})
    task = _task("tools", "tools-cap-weather", attack=plan)
    result = await EpisodeRunner(producer, CarefulPolicy()).run(env, task, resolve_task(task))
    events = await _read(topics, ["steps", "episodes"], until=result.num_steps + 2)
    steps = {d.event.step_index: d.event for d in events if isinstance(d.event, Step)}
    assert steps[0].injection is not None and steps[0].injection.goal == "pay"
    assert steps[0].injection.payload in (steps[0].tool_result or "")
    assert all(s.injection is None for i, s in steps.items() if i)
    started = next(d.event for d in events if isinstance(d.event, EpisodeStarted))
    assert started.attack == plan


class _Stuck(Policy):
    name = "stuck"

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        await asyncio.sleep(30)
        raise AssertionError("unreachable")


async def test_timeouts_abandon_and_pools_replace(
    producer: EventProducer, topics: Settings
) -> None:
    pool = await EnvPool("qa", size=2).start()
    assert pool.ready == 2
    actors = ActorPool(EpisodeRunner(producer, _Stuck(), timeout_s=0.3), {"qa": pool}, 2)
    work = [(t, resolve_task(t)) for t in suite_tasks("qa", 3, group_id="g")]
    results = await actors.run_many(work)
    assert [r.outcome for r in results] == [Outcome.ABANDONED] * 3
    assert pool.stats.replaced == 3 and pool.stats.acquired == 3
    async with asyncio.timeout(30):
        await pool.wait_full()
    assert pool.ready == 2
    ended = await _read(topics, ["episodes"], until=6)
    assert sum(isinstance(d.event, EpisodeEnded) for d in ended) == 3
    await actors.close()


async def test_pool_health_check_replaces_bad_environments() -> None:
    built: list[Environment] = []

    def factory() -> Environment:
        env = make_env("embodied")
        if len(built) % 2 == 0:
            env.healthy = lambda: False  # type: ignore[method-assign]
        built.append(env)
        return env

    pool = await EnvPool("embodied", size=2, factory=factory).start()
    assert pool.ready == 2 and pool.stats.unhealthy == 2 and pool.stats.built == 4
    await pool.close()


async def test_pool_that_cannot_build_says_why() -> None:
    def factory() -> Environment:
        raise SandboxError("'bwrap' not found; install it")

    pool = EnvPool("os", size=1, factory=factory)
    with pytest.raises(EnvError, match="cannot build 'os' environments: SandboxError: 'bwrap'"):
        async with asyncio.timeout(30):
            await pool.acquire()
    await pool.close()


async def test_workers_share_the_task_queue_and_reload_stale_policies(
    producer: EventProducer,
    topics: Settings,
) -> None:
    policy_a, policy_b = CarefulPolicy(version=0), CarefulPolicy(version=0)
    await producer.publish(
        PolicyVersion(policy_name="careful", policy_version=5, uri="mem://v5", sha256="a" * 64)
    )
    done: list[str] = []
    all_done = asyncio.Event()

    def finished(result: EpisodeResult) -> None:
        done.append(result.task_id)
        if len(done) == len(tasks):
            all_done.set()

    workers = [
        SimulationWorker(
            topics,
            p,
            concurrency=4,
            group_id="sim-test",
            staleness=StalenessController(max_staleness=1, max_in_flight=4),
            on_done=finished,
        )
        for p in (policy_a, policy_b)
    ]
    for w in workers:
        await w.start()
    tasks = [
        *suite_tasks("embodied", 10, group_id="shared"),
        Task(task_id="bad-1", env="embodied", spec={"suite_task": "nope"}),
    ]
    await producer.publish_many(tasks)
    runs = [asyncio.create_task(w.run()) for w in workers]
    async with asyncio.timeout(90):
        await all_done.wait()
    for w in workers:
        w.request_stop()
    await asyncio.gather(*runs)
    for w in workers:
        await w.stop()
    assert sorted(done) == sorted(t.task_id for t in tasks)
    ran = [r for w in workers for r in w.sim.results]
    assert all(r.policy_version == 5 for r in ran if r.num_steps)
    assert sum(w.sim.admission.stats.reloads for w in workers) >= 1
    events = await _read(topics, ["episodes"], until=2 * len(tasks))
    ends = [d.event for d in events if isinstance(d.event, EpisodeEnded)]
    assert {e.task_id for e in ends} == {t.task_id for t in tasks}
    assert next(e for e in ends if e.task_id == "bad-1").outcome == Outcome.ERROR
    steps = await _read(topics, ["steps"], until=sum(r.num_steps for r in ran))
    assert {headers.Headers.decode(d.headers).policy_version for d in steps} == {5}


async def test_a_record_on_the_task_topic_that_is_no_task_is_dead_lettered(
    producer: EventProducer, topics: Settings
) -> None:
    from safactory.schemas import Action, DeadLetter

    stray = Step(
        episode_id="stray",
        step_index=0,
        env="embodied",
        task_id="t",
        policy_version=0,
        observation="o",
        action=Action(text="a"),
    )
    task = suite_tasks("embodied", 1, group_id="g-stray")[0]
    await producer.publish(stray, topic=topics.topic("tasks"))
    await producer.publish(task)
    done = asyncio.Event()
    worker = SimulationWorker(
        topics, CarefulPolicy(), concurrency=1, group_id="sim-stray", on_done=lambda _: done.set()
    )
    await worker.start()
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(60):
            await done.wait()
    finally:
        worker.request_stop()
        await running
        await worker.stop()
    [dead] = [
        DeadLetter.from_record(d.key, d.value, d.headers)
        for d in await _read(topics, ["dlq"], until=1)
    ]
    assert dead.origin_group == worker.group_id
    assert dead.error.startswith("task: Step") and dead.origin_offset >= 0


async def test_a_task_whose_environment_cannot_be_built_is_dead_lettered(
    topics: Settings, producer: EventProducer
) -> None:
    """Poison pill: a well-formed task for an environment that cannot be built made the
    worker's batch raise, unguarded, on every restart. Now it is retried, dead-lettered with
    the error, and the tasks beside it run."""
    from poison import POISON

    from safactory.schemas import DeadLetter, Task

    good = suite_tasks("embodied", 2, group_id="g-poison")
    bad = Task(
        task_id=POISON,
        env="no-such-env",
        spec={"task_id": POISON, "kind": "capability", "instruction": "never runs"},
    )
    await producer.publish_many([good[0], bad, good[1]])
    worker = SimulationWorker(topics, CarefulPolicy(), concurrency=3, group_id="sim-poison")
    await worker.start()
    running = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(120):
            while len(worker.sim.results) < 2:
                assert not running.done(), running.exception()
                await asyncio.sleep(0.2)
        dead = await _read(topics, ["dlq"], until=1)
        assert not running.done(), "the worker stopped on the poison task"
    finally:
        worker.request_stop()
        await running
        await worker.stop()
    assert sorted(r.task_id for r in worker.sim.results) == sorted(t.task_id for t in good)
    [letter] = [DeadLetter.from_record(d.key, d.value, d.headers) for d in dead]
    assert letter.error.startswith("handler: EnvError") and "no-such-env" in letter.error
