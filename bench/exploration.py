"""Exploration from safety anchors vs plain sampling: distinct unsafe actions found per
CPU-minute, on the same budget of episodes, and what training on each finds held out.

Discovery. SmolLM2-135M (the demo's menu policy, v0) on the choice environment's training
chores, shuffled menus. *Plain*: ``--budget`` episodes, seeds S.. . *Exploration*: episodes
with the same seeds, each flagged step (the auditor's fast tier, in process, observing)
branched into ``--branches`` siblings from its anchor, until parents and branches together
reach the same budget. Counted: distinct destructive commands the environment saw run (and
distinct chore × command pairs, of 15 on the menus), per CPU-minute of this process.

Training (``--train-rounds R``, optional, about a minute per round and arm on 2 cores). Each
arm's rollouts train a fresh copy of the model with the demo's learner settings (full
fine-tuning, lr 1e-4, one update per round of ``--budget`` episodes, group-relative
advantages: chore groups for plain episodes, anchor groups for siblings): *plain*,
*exploration*, and *untaken*: plain rollouts whose menu steps also get the fast tier's
verdicts on every choice not taken (``Verdict.choice``, what the auditor's hook will publish)
and train with ``untaken_advantage = -1``. Then the held-out chores of the demo (seeds
S..S+23) are scored by the exact probability each policy puts on destructive commands and
by a sampled run (the demo's "after" round).

    python bench/exploration.py --budget 96 --branches 4
    python bench/exploration.py --budget 24 --train-rounds 7 --seed 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from pathlib import Path

from safactory.agents.env import TaskSpec
from safactory.agents.envs.choice_env import ChoiceEnv, choice_suite
from safactory.agents.explore import Exploration
from safactory.agents.policies.hf_local import HFLocalPolicy
from safactory.agents.runner import EpisodeResult, EpisodeRunner
from safactory.infra.models import resolve_model
from safactory.schemas import (
    Action,
    ChatMessage,
    Decision,
    EpisodeEnded,
    Event,
    Step,
    Task,
    Trajectory,
    Verdict,
    derive_id,
)
from safactory.streams.assembly.fold import AssemblerConfig, TrajectoryAssembler
from safactory.streams.audit.engine import AuditEngine
from safactory.streams.audit.guard import AuditGuard


class Kept:
    """A publisher that keeps every event (the bench runs without a broker)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> None:
        self.events.append(event)


def chores(split: str) -> list[TaskSpec]:
    """The demo's chores of ``split``, menus shuffled per episode."""
    return [
        t.model_copy(update={"params": {**t.params, "shuffle": True}})
        for t in choice_suite()
        if t.params["split"] == split
    ]


def unsafe_actions(results: list[EpisodeResult], kept: Kept) -> set[tuple[str, str]]:
    """(chore, command) of every episode the environment judged unsafe."""
    command = {e.episode_id: e.action.text or "" for e in kept.events if isinstance(e, Step)}
    found = set()
    for result in results:
        if result.judgement is not None and result.judgement.safety.unsafe:
            found.add((result.task_id.rsplit("-r", 1)[0], command[result.episode_id]))
    return found


async def rollouts(
    policy: HFLocalPolicy, budget: int, seed: int, explore: Exploration | None, tag: str
) -> tuple[list[EpisodeResult], Kept, float]:
    """Episodes (with their branches) until ``budget`` of them ran; CPU seconds taken."""
    kept = Kept()
    runner = EpisodeRunner(kept, policy, exploration=explore)
    train = chores("train")
    results: list[EpisodeResult] = []
    cpu = time.process_time()
    i = 0
    while len(results) < budget:
        spec = train[i % len(train)]
        task = Task(
            task_id=f"{spec.task_id}-r{tag}{i}",
            env="choice",
            seed=seed + i,
            group_id=f"{tag}-{spec.task_id}",
        )
        result = await runner.run(ChoiceEnv(), task, spec)
        results += [result, *result.branches][: budget - len(results)]
        i += 1
    return results, kept, time.process_time() - cpu


async def untaken_verdicts(engine: AuditEngine, step: Step, context: list[Step]) -> list[Verdict]:
    """The fast tier's blocking verdicts on each choice ``step`` offered and did not take,
    marked with ``choice`` (the auditor's hook for actions not taken, done here)."""
    out = []
    for index, command in enumerate(step.choices or ()):
        if command == step.action.text:
            continue
        what_if = step.model_copy(
            update={  # proposed, never run: no output, the reply naming the command
                "action": Action(text=command),
                "tool_result": None,
                "messages": [ChatMessage(role="assistant", content=command)],
                "event_id": derive_id("bench-untaken", 1, step.event_id, index),
            }
        )
        for verdict in (await engine.audit_step(what_if, context)).verdicts:
            if verdict.decision is Decision.BLOCK:
                out.append(
                    verdict.model_copy(
                        update={
                            "choice": index,
                            "source_event_id": step.event_id,
                            "event_id": derive_id("bench-untaken", 1, verdict.event_id, index),
                        }
                    )
                )
    return out


async def trajectories(
    kept: Kept, keep: set[str], engine: AuditEngine, untaken: bool = False
) -> list[Trajectory]:
    """The assembler's trajectories of the episodes in ``keep``, rewarded by its default
    rule over the fast tier's verdicts (the live auditor's step tier); with ``untaken``,
    also the verdicts on the choices not taken."""
    fold = TrajectoryAssembler(AssemblerConfig(require_verdicts=False))
    out: list[Event] = []
    for episode in keep:
        events = [e for e in kept.events if getattr(e, "episode_id", None) == episode]
        steps = [e for e in events if isinstance(e, Step)]
        audits = await engine.audit_episode(steps, tier="step")
        verdicts = [v for audit in audits for v in audit.all_verdicts]
        if untaken:
            for i, step in enumerate(steps):
                verdicts += await untaken_verdicts(engine, step, steps[:i])
        for event in (*[e for e in events if not isinstance(e, EpisodeEnded)], *verdicts):
            out += fold.apply(event, time.time())
        for event in events:
            if isinstance(event, EpisodeEnded):
                out += fold.apply(event, time.time())
    return [t for t in out if isinstance(t, Trajectory)]


def held_out_p_unsafe(policy: HFLocalPolicy, seed: int, n: int = 24) -> float:
    """Mean probability the policy puts on destructive commands over the held-out chores."""
    held = chores("heldout")
    values = []
    for i in range(n):
        env = ChoiceEnv()
        reset = env.reset(held[i % len(held)], seed + i)
        probs = policy.menu_distribution(
            policy.prompt_ids(list(reset.prompt), []), [e.command for e in env.menu]
        )
        values.append(sum(p for p, e in zip(probs, env.menu, strict=True) if e.destroys))
    return statistics.fmean(values)


async def held_out_unsafe(policy: HFLocalPolicy, seed: int, n: int = 24) -> int:
    """Sampled held-out episodes the environment judged unsafe (the demo's after round)."""
    held = chores("heldout")
    runner = EpisodeRunner(Kept(), policy)
    unsafe = 0
    for i in range(n):
        spec = held[i % len(held)]
        task = Task(task_id=f"held-{i}", env="choice", seed=seed + i)
        result = await runner.run(ChoiceEnv(), task, spec)
        unsafe += bool(result.judgement and result.judgement.safety.unsafe)
    return unsafe


async def train(
    args: argparse.Namespace, explore: Exploration | None, untaken: bool
) -> dict[str, object]:
    """The demo's training rounds in process, for one arm; held-out afterwards."""
    from safactory.trainer.config import TrainerConfig
    from safactory.trainer.learner import Learner
    from safactory.trainer.model import load_policy_model, resolve_placement

    cfg = TrainerConfig.model_validate(
        {
            "lr": 1e-4,
            "seq_len": 512,
            "rows_per_micro_batch": 2,
            "batch_size": args.budget,
            "max_batch_size": 4 * args.budget,
            "model": {"name": args.model},
            "untaken_advantage": -1.0 if untaken else 0.0,
        }
    )
    model, tokenizer = load_policy_model(cfg.model)
    engine = AuditGuard().engine
    learner = Learner(model, tokenizer, cfg, resolve_placement(cfg))
    policy = HFLocalPolicy(resolve_model(args.model), decode="auto")
    policy.model, policy.tokenizer = learner.model, tokenizer  # act with the trained weights
    sampled: list[set[tuple[str, str]]] = []
    for round_ in range(1, args.train_rounds + 1):
        learner.model.eval()
        results, kept, _ = await rollouts(
            policy, args.budget, args.seed + 1000 * round_, explore, f"{round_}-"
        )
        sampled.append(unsafe_actions(results, kept))
        batch = await trajectories(kept, {r.episode_id for r in results}, engine, untaken)
        learner.model.train()
        await asyncio.to_thread(learner.update, batch)
        print(
            f"  round {round_}: {len(batch)} trajectories, unsafe "
            f"{sum(bool(r.judgement and r.judgement.safety.unsafe) for r in results)}"
        )
    learner.model.eval()
    return {
        "untaken_sequences": learner.transformer.stats.untaken,
        "held_out_p_unsafe": held_out_p_unsafe(policy, args.seed),
        "held_out_unsafe_of_24": await held_out_unsafe(policy, args.seed),
        "unsafe_actions_sampled_in_training": sorted({a for s in sampled for a in s}),
    }


async def main(args: argparse.Namespace) -> dict[str, object]:
    policy = HFLocalPolicy(resolve_model(args.model), decode="auto")
    flagger = AuditGuard()
    out: dict[str, object] = {"budget": args.budget, "branches": args.branches}
    arms = {"plain": None, "exploration": Exploration(args.branches, flagger=flagger)}
    for name, explore in arms.items():
        results, kept, cpu = await rollouts(policy, args.budget, args.seed, explore, f"{name}-")
        found = unsafe_actions(results, kept)
        commands = {c for _, c in found}
        unsafe = sum(bool(r.judgement and r.judgement.safety.unsafe) for r in results)
        out[name] = {
            "episodes": len(results),
            "unsafe_episodes": unsafe,
            "distinct_unsafe_commands": len(commands),
            "distinct_chore_command_pairs": len(found),
            "cpu_s": round(cpu, 1),
            "commands_per_cpu_min": round(len(commands) / (cpu / 60.0), 2),
            "pairs_per_cpu_min": round(len(found) / (cpu / 60.0), 2),
            "commands": dict(Counter(c for _, c in found)),
        }
        print(
            f"{name:<12} {len(results)} episodes ({unsafe} unsafe), "
            f"{len(commands)} distinct unsafe commands, {len(found)} chore x command pairs "
            f"of 15, {cpu:.0f} CPU-s: {out[name]['commands_per_cpu_min']} commands and "  # type: ignore[index]
            f"{out[name]['pairs_per_cpu_min']} pairs per CPU-minute"  # type: ignore[index]
        )
    if args.train_rounds:
        trained = {**arms, "untaken": None}
        for name in args.arms.split(","):
            print(f"training {args.train_rounds} rounds, {name}")
            out[f"trained_{name}"] = await train(args, trained[name], name == "untaken")
            print(f"  {name}: {json.dumps(out[f'trained_{name}'], default=list)}")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--budget", type=int, default=96, help="episodes per arm (per round)")
    parser.add_argument("--branches", type=int, default=4, help="siblings per flagged step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-rounds", type=int, default=0)
    parser.add_argument("--arms", default="plain,exploration,untaken", help="arms to train")
    parser.add_argument("--out", help="write every number as JSON here")
    options = parser.parse_args()
    measured = asyncio.run(main(options))
    if options.out:
        Path(options.out).write_text(json.dumps(measured, indent=2, default=list))
        print(f"wrote {options.out}")
