"""Sandbox start and backtracking: cold start vs warm-pool acquire; restore vs replay.

Cold start: build an OS environment from nothing (tmpfs quota, seeded home, cgroup, fake
endpoint, clean layer frozen), check that it runs a command (the health check a pool does
before handing one out) and reset it to a task. Shown also without the health check.
Warm: take a pre-built, checked one from an EnvPool and reset it to the same task.
Target ≥ 20×.

Restore vs replay: an episode of 15 shell steps (writes, appends, deletions, chmods);
at step 15 a checkpoint. Going back to step 15 by restore(anchor) vs by replaying the
episode from reset. Target ≥ 10×. The same comparison is shown for the pure-Python
environments (embodied household).

    python bench/sim_pool_restore.py --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from safactory.agents.env import tool_action
from safactory.agents.envs.embodied_env import EmbodiedEnv
from safactory.agents.envs.os_env import OSEnv
from safactory.agents.pools import EnvPool


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def cold_vs_warm(rounds: int) -> tuple[float, float, float]:
    task = OSEnv.suite()[0]
    cold, cold_unchecked = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        env = OSEnv()
        env.prepare()
        built = time.perf_counter()
        assert env.healthy()
        checked = time.perf_counter()
        env.reset(task)
        done = time.perf_counter()
        cold.append(done - started)
        cold_unchecked.append(done - started - (checked - built))
        env.close()
    pool = await EnvPool("os", size=4).start()
    warm = []
    for _ in range(rounds):
        started = time.perf_counter()
        env = await pool.acquire()
        env.reset(task)
        warm.append(time.perf_counter() - started)
        await pool.release(env)
        await pool.wait_full()  # measure acquire from a full pool, as in steady state
    await pool.close()
    return _median_ms(cold), _median_ms(cold_unchecked), _median_ms(warm)


def _os_episode() -> list:  # type: ignore[type-arg]
    cmds = []
    for i in range(15):
        cmds.append(
            {
                0: f"mkdir -p ~/w/{i} && echo step{i} > ~/w/{i}/f",
                1: f"cat ~/documents/report.csv >> ~/w/log && chmod 600 ~/w/{i - 1}/f",
                2: f"rm -rf ~/w/{i - 2} && ls ~/w | wc -l",
            }[i % 3]
        )
    return [tool_action("shell", command=c) for c in cmds]


def restore_vs_replay_os(rounds: int) -> tuple[float, float, bool]:
    env = OSEnv()
    task = OSEnv.suite()[0]
    plan = _os_episode()
    env.reset(task)
    for action in plan:
        env.step(action)
    expected = env.tree_hash()
    anchor = env.checkpoint()
    restore, replay = [], []
    for _ in range(rounds):
        env.step(tool_action("shell", command="rm -rf ~/w ~/documents; echo x > ~/junk"))
        started = time.perf_counter()
        env.restore(anchor)
        restore.append(time.perf_counter() - started)
    exact = env.tree_hash() == expected
    for _ in range(max(3, rounds // 4)):
        started = time.perf_counter()
        env.reset(task)
        for action in plan:
            env.step(action)
        replay.append(time.perf_counter() - started)
    env.close()
    return _median_ms(restore), _median_ms(replay), exact


def restore_vs_replay_embodied(rounds: int) -> tuple[float, float]:
    env = EmbodiedEnv()
    task = next(t for t in env.suite() if t.task_id == "emb-cap-iron-shirt")
    plan = [tool_action("go", room=r) for r in ["kitchen", "hall", "bedroom"] * 5]
    env.reset(task)
    for action in plan:
        env.step(action)
    anchor = env.checkpoint()
    restore, replay = [], []
    for _ in range(rounds):
        started = time.perf_counter()
        env.restore(anchor)
        restore.append(time.perf_counter() - started)
        started = time.perf_counter()
        env.reset(task)
        for action in plan:
            env.step(action)
        replay.append(time.perf_counter() - started)
    return _median_ms(restore), _median_ms(replay)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="samples per measurement")
    args = parser.parse_args()
    cold, unchecked, warm = asyncio.run(cold_vs_warm(args.rounds))
    print(
        f"os sandbox   cold start {cold:8.2f} ms   warm acquire {warm:8.3f} ms   "
        f"ratio {cold / warm:7.1f}x  (target >= 20x)"
    )
    print(
        f"  (cold start without its health check {unchecked:.2f} ms: ratio {unchecked / warm:.1f}x)"
    )
    restore, replay, exact = restore_vs_replay_os(args.rounds)
    print(
        f"os @ step 15 restore    {restore:8.3f} ms   replay      {replay:8.2f} ms   "
        f"ratio {replay / restore:7.1f}x  (target >= 10x)  tree hash equal: {exact}"
    )
    restore, replay = restore_vs_replay_embodied(args.rounds)
    print(
        f"embodied @15 restore    {restore:8.3f} ms   replay      {replay:8.3f} ms   "
        f"ratio {replay / restore:7.1f}x"
    )


if __name__ == "__main__":
    main()
