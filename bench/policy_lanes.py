"""Menus scored one at a time on every thread vs ``lanes`` at a time on one thread each.

The demo's simulation worker scores the choice environment's menus with SmolLM2 (one
prompt of ~115 tokens, six replies). Both arms run the same shuffled-menu chores through
:meth:`HFLocalPolicy.act`, in alternation, on this CPU; each arm is its own process (torch's
thread count is per process), so they never share a pool.

    python bench/policy_lanes.py [--menus 48] [--lanes 2] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

ARM = """
import asyncio, json, sys, time, torch
from safactory.agents.envs.choice_env import ChoiceEnv, choice_suite
from safactory.agents.policies.base import PolicyInput
from safactory.agents.policies.hf_local import HFLocalPolicy
from safactory.infra.models import resolve_model
menus, lanes, threads = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(threads)
policy = HFLocalPolicy(resolve_model("smollm2-135m"), lanes=lanes)
tasks = [t for t in choice_suite() if "heldout" not in t.task_id] or choice_suite()
inputs = []
for i in range(menus):
    task = tasks[i % len(tasks)].model_copy(update={"seed": i})
    task = task.model_copy(update={"params": {**task.params, "shuffle": True}})
    reset = ChoiceEnv().reset(task)
    inputs.append(PolicyInput(messages=reset.prompt, tools=reset.tools, task=task,
                              choices=reset.choices, seed=i, step_index=0))
async def run():
    await policy.act(inputs[0])
    began = time.perf_counter()
    await asyncio.gather(*(policy.act(x) for x in inputs))
    return time.perf_counter() - began
print(json.dumps({"seconds": asyncio.run(run()), "prompt": len(policy.prompt_ids(
    inputs[0].messages, []))}))
"""


def arm(menus: int, lanes: int, threads: int) -> dict[str, float]:
    """One arm in a fresh process: seconds for ``menus`` menus."""
    out = subprocess.run(
        [sys.executable, "-c", ARM, str(menus), str(lanes), str(threads)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--menus", type=int, default=48)
    parser.add_argument("--lanes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from safactory.infra.compute import cpu_class

    info = cpu_class()
    print(f"cpu: {info['class']} ({info['model']}), {info['cores']} cores, caps {info['caps']}")
    seconds: dict[str, list[float]] = {"one call, all threads": [], "lanes": []}
    prompt = 0
    for _ in range(args.repeats):
        one = arm(args.menus, 1, args.lanes)
        many = arm(args.menus, args.lanes, args.lanes)
        seconds["one call, all threads"].append(one["seconds"])
        seconds["lanes"].append(many["seconds"])
        prompt = int(one["prompt"])
    best = {k: min(v) for k, v in seconds.items()}
    print(f"{args.menus} menus, prompts of {prompt} tokens, {args.lanes} threads")
    for name, value in best.items():
        print(f"  {name:22s} {value:6.1f} s  {args.menus / value:5.2f} menus/s")
    print(f"  lanes / one call: {best['one call, all threads'] / best['lanes']:.2f}x menus/s")


if __name__ == "__main__":
    main()
