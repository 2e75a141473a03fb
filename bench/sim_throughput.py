"""Simulation throughput: steps/s with a scripted policy at concurrency 1, 8, 32, 128.

Each level runs max(--episodes, concurrency) episodes of the env's suite (pure-Python envs:
--python-episodes, as their episodes take milliseconds) through the real
pipeline: EnvPool (pre-warmed to the concurrency, warm-up not timed) → ActorPool →
EpisodeRunner, publishing EpisodeStarted, every Step (acks=all, awaited before the next
step) and EpisodeEnded to the broker at SF_KAFKA_BOOTSTRAP (fresh topics per run).
CPU is this process plus its reaped children (sandbox commands), as a share of one core;
the broker's CPU is not included.

    python bench/sim_throughput.py --envs tools,os --levels 1,8,32,128 \
        --episodes 320 --python-episodes 256
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
import uuid

from safactory.agents.policies import CarefulPolicy
from safactory.agents.pools import ActorPool, EnvPool
from safactory.agents.registry import env_class
from safactory.agents.runner import EpisodeRunner
from safactory.agents.tasks import resolve_task, suite_tasks
from safactory.bench.bus import drop_topics
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.infra.topics import create_topics


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


async def level(
    producer: EventProducer,
    env: str,
    concurrency: int,
    episodes: int,
) -> tuple[int, int, float, float]:
    pool = await EnvPool(env, size=concurrency).start()
    actors = ActorPool(EpisodeRunner(producer, CarefulPolicy()), {env: pool}, concurrency)
    tasks = suite_tasks(env, max(episodes, concurrency), group_id=f"bench-{uuid.uuid4().hex[:6]}")
    work = [(t, resolve_task(t)) for t in tasks]
    cpu0, t0 = _cpu_seconds(), time.perf_counter()
    results = await actors.run_many(work)
    wall = time.perf_counter() - t0
    cpu = _cpu_seconds() - cpu0
    await actors.close()
    return len(results), sum(r.num_steps for r in results), wall, cpu


async def main(envs: list[str], levels: list[int], episodes: int, python_episodes: int) -> None:
    settings = Settings(topic_prefix=f"bench{uuid.uuid4().hex[:6]}.")
    await create_topics(settings)
    async with EventProducer(settings) as producer:
        print(
            f"{'env':9} {'conc':>5} {'episodes':>8} {'steps':>6} {'wall s':>7} "
            f"{'steps/s':>8} {'episodes/s':>10} {'cpu %':>6}"
        )
        for env in envs:
            for conc in levels:
                count = episodes if env_class(env).blocking else python_episodes
                n, steps, wall, cpu = await level(producer, env, conc, count)
                print(
                    f"{env:9} {conc:5d} {n:8d} {steps:6d} {wall:7.2f} {steps / wall:8.1f} "
                    f"{n / wall:10.1f} {100 * cpu / wall:6.0f}"
                )
    await drop_topics(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default="tools,os", help="comma-separated env names")
    parser.add_argument("--levels", default="1,8,32,128", help="concurrency levels")
    parser.add_argument(
        "--episodes", type=int, default=320, help="episodes per level for sandboxed envs"
    )
    parser.add_argument(
        "--python-episodes", type=int, default=256, help="episodes per level, pure-Python envs"
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    asyncio.run(main(args.envs.split(","), levels, args.episodes, args.python_episodes))
