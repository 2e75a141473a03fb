"""Experience injection, measured: held-out chores with and without skills, same seeds, same
weights.

1. **Skills.** The policy runs the choice environment's *training* chores (shuffled menus);
   the auditor (the default checkers, in process) judges every step; the assembler's fold
   makes the trajectories; the skills distiller (``distil_lessons``) and library (MiniLM,
   deduplicated) turn the unsafe and failed ones into skills — the pipeline of ``safactory
   worker audit | assemble | skills``, without Kafka. No held-out episode is read.
2. **A/B.** The held-out chores (never trained on, never distilled from), seeds S..S+n-1,
   once with the bare prompt and once with the ``--skills`` most similar skills in the
   system prompt (``SkillfulPolicy``, what ``simulate worker --skills N`` runs). A menu
   policy samples with a generator seeded by (seed, step), so both arms draw the same random
   number per episode: a difference is the prompt's doing.

Reported per arm: unsafe rate and done safely (Wilson 95 % intervals), mean reward (the
assembler's default rule over the auditor's verdicts; bootstrap 95 %), and for the ``hf``
policy the exact probability it puts on destructive commands (mean P(unsafe), no sampling
noise), with the paired difference. What the policy was given (the retrieved skills and one
injected prompt) is printed too.

    python bench/skills_injection.py                       # SmolLM2-135M, 96 held-out
    python bench/skills_injection.py --base-url http://127.0.0.1:8000/v1 --served-model NAME
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from safactory.agents.env import TaskSpec
from safactory.agents.envs.choice_env import ChoiceEnv, choice_suite
from safactory.agents.policies.base import Policy
from safactory.agents.policies.hf_local import HFLocalPolicy
from safactory.agents.policies.openai_chat import OpenAIChatPolicy
from safactory.agents.runner import EpisodeRunner
from safactory.agents.skills import SkillfulPolicy
from safactory.infra.embedding import MiniLM
from safactory.infra.models import resolve_model
from safactory.schemas import EpisodeEnded, EpisodeStarted, Event, Step, Task, Trajectory, Verdict
from safactory.streams.assembly.fold import AssemblerConfig, TrajectoryAssembler
from safactory.streams.audit import registry
from safactory.streams.audit.engine import AuditEngine
from safactory.streams.evaluation.picture import wilson
from safactory.streams.skills import SkillLibrary
from safactory.streams.skills.library import RELEVANT, distil_lessons, safe_acts


class Kept:
    """A publisher that keeps every event (the bench runs without a broker)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> None:
        self.events.append(event)


@dataclass
class Episode:
    """One episode as the pipeline saw it."""

    task_id: str
    seed: int
    unsafe: bool
    done_safely: bool
    reward: float
    skills: list[str]
    violations: list[str]
    picked: str
    p_unsafe: float | None = None
    prompt: list[dict[str, object]] = field(default_factory=list)


async def run_episode(
    policy: Policy, engine: AuditEngine, spec: TaskSpec, seed: int, tag: str
) -> tuple[Episode, Trajectory, list[Verdict]]:
    """Run, audit and assemble one episode of ``spec`` with ``seed``."""
    kept = Kept()
    env = ChoiceEnv()
    task = Task(task_id=f"{tag}-{seed}-{spec.task_id}", env="choice", seed=seed, group_id=tag)
    await EpisodeRunner(kept, policy).run(env, task, spec)
    steps = [e for e in kept.events if isinstance(e, Step)]
    started = next(e for e in kept.events if isinstance(e, EpisodeStarted))
    ended = next(e for e in kept.events if isinstance(e, EpisodeEnded))
    verdicts = [v for audit in await engine.audit_episode(steps) for v in audit.all_verdicts]
    fold = TrajectoryAssembler(AssemblerConfig(require_verdicts=False))
    out: list[Event] = []
    for event in (started, *steps, *verdicts, ended):
        out += fold.apply(event, time.time())
    trajectory = next(e for e in out if isinstance(e, Trajectory))
    unsafe = bool(ended.safety and ended.safety.unsafe)
    p_unsafe = None
    inner = policy.inner if isinstance(policy, SkillfulPolicy) else policy
    if isinstance(inner, HFLocalPolicy):  # what it samples from, on the prompt it was given
        ids = inner.prompt_ids(list(started.prompt), [])
        probs = inner.menu_distribution(ids, [e.command for e in env.menu])
        p_unsafe = sum(p for p, e in zip(probs, env.menu, strict=True) if e.destroys)
    episode = Episode(
        task_id=spec.task_id,
        seed=seed,
        unsafe=unsafe,
        done_safely=ended.outcome.value == "success" and not unsafe,
        reward=trajectory.reward,
        skills=list(started.skills),
        violations=list(ended.safety.violations) if ended.safety else [],
        picked=steps[0].action.text or "" if steps else "",
        p_unsafe=p_unsafe,
        prompt=[m.model_dump(exclude_none=True) for m in started.prompt],
    )
    return episode, trajectory, verdicts


def bootstrap(values: list[float], rounds: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap 95 % interval of the mean of ``values``."""
    if not values:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(rounds))
    return (means[int(0.025 * rounds)], means[int(0.975 * rounds) - 1])


def summary(episodes: list[Episode]) -> dict[str, object]:
    """The arm's numbers with their intervals."""
    n = len(episodes)
    unsafe = sum(e.unsafe for e in episodes)
    safe = sum(e.done_safely for e in episodes)
    rewards = [e.reward for e in episodes]
    row: dict[str, object] = {
        "episodes": n,
        "unsafe": unsafe,
        "unsafe_ci": wilson(unsafe, n),
        "done_safely": safe,
        "done_safely_ci": wilson(safe, n),
        "mean_reward": statistics.fmean(rewards),
        "mean_reward_ci": bootstrap(rewards),
        "violations": dict(Counter(v for e in episodes for v in e.violations).most_common()),
    }
    if all(e.p_unsafe is not None for e in episodes):
        p = [float(e.p_unsafe or 0.0) for e in episodes]
        row |= {"mean_p_unsafe": statistics.fmean(p), "mean_p_unsafe_ci": bootstrap(p)}
    return row


def paired(a: list[Episode], b: list[Episode], attr: str) -> dict[str, object]:
    """Mean of b − a over the same seeds, with a bootstrap interval."""
    diffs = [float(getattr(y, attr)) - float(getattr(x, attr)) for x, y in zip(a, b, strict=True)]
    return {"mean": statistics.fmean(diffs), "ci": bootstrap(diffs)}


async def measure(args: argparse.Namespace, label: str, policy: Policy) -> dict[str, object]:
    """Distil skills from training chores, then run the held-out A/B for one policy."""
    engine = AuditEngine(registry.create())
    library = SkillLibrary(MiniLM(), relevant=args.relevant)
    train = [t.model_copy(update={"params": {**t.params, "shuffle": True}}) for t in choice_suite()]
    held_out = [t for t in train if t.params["split"] == "heldout"]
    train = [t for t in train if t.params["split"] == "train"]
    source = held_out if args.distil_from == "heldout" else train
    started = time.perf_counter()
    ran = []
    for i in range(args.train_episodes):  # seeds from 1000: never the A/B's
        spec = source[i % len(source)]
        _, trajectory, verdicts = await run_episode(
            policy, engine, spec, args.seed + 1000 + i, "train"
        )
        ran.append((spec.task_id, trajectory, verdicts))
    for chore, trajectory, verdicts in ran:  # a chore's episodes are one group of siblings
        siblings = [
            acts
            for other_chore, other, _ in ran
            if other_chore == chore and other is not trajectory
            if (acts := safe_acts(other)) is not None
        ]
        library.add(distil_lessons(trajectory, verdicts, siblings))
    print(
        f"[{label}] {args.train_episodes} {args.distil_from} episodes -> {len(library.skills)} "
        f"skills ({time.perf_counter() - started:.0f} s)"
    )
    arms: dict[str, list[Episode]] = {}
    for arm, acting in (
        ("without", policy),
        (f"with {args.skills} skills", SkillfulPolicy(policy, library, args.skills)),
    ):
        began = time.perf_counter()
        arms[arm] = [
            (await run_episode(acting, engine, held_out[i % len(held_out)], args.seed + i, arm))[0]
            for i in range(args.episodes)
        ]
        print(
            f"[{label}] held-out {arm}: {args.episodes} episodes "
            f"({time.perf_counter() - began:.0f} s)"
        )
    without, with_ = arms.values()
    result: dict[str, object] = {
        "policy": label,
        "skills_in_library": [s.model_dump() for s in library.skills],
        "arms": {arm: summary(eps) for arm, eps in arms.items()},
        "paired": {
            attr: paired(without, with_, attr)
            for attr in ("unsafe", "done_safely", "reward", "p_unsafe")
            if attr != "p_unsafe" or all(e.p_unsafe is not None for e in without + with_)
        },
        "retrieved": {
            spec.task_id: next(e.skills for e in with_ if e.task_id == spec.task_id)
            for spec in held_out
        },
        "example_prompt": with_[0].prompt,
        "changed_pick": sum(x.picked != y.picked for x, y in zip(without, with_, strict=True)),
    }
    show(result)
    return result


def show(result: dict[str, object]) -> None:
    """Print the side-by-side table and what the policy was given."""
    arms: dict[str, dict[str, object]] = result["arms"]  # type: ignore[assignment]
    print(f"\n{result['policy']}: held-out chores, same seeds and weights")
    print(
        f"{'arm':<18} {'unsafe (95% CI)':<24} {'done safely (95% CI)':<24} "
        f"{'mean reward (95% CI)':<24} mean P(unsafe)"
    )
    for arm, row in arms.items():
        n = row["episodes"]
        lo, hi = row["unsafe_ci"]  # type: ignore[misc]
        slo, shi = row["done_safely_ci"]  # type: ignore[misc]
        rlo, rhi = row["mean_reward_ci"]  # type: ignore[misc]
        p = row.get("mean_p_unsafe")
        shown_p = (
            "-"
            if p is None
            else f"{p:.3f} ({row['mean_p_unsafe_ci'][0]:.3f}–{row['mean_p_unsafe_ci'][1]:.3f})"
        )  # type: ignore[index]
        print(
            f"{arm:<18} {row['unsafe']}/{n} ({lo:.0%}–{hi:.0%}){'':<6} "
            f"{row['done_safely']}/{n} ({slo:.0%}–{shi:.0%}){'':<6} "
            f"{row['mean_reward']:+.2f} ({rlo:+.2f}–{rhi:+.2f}){'':<6} {shown_p}"
        )
    for attr, diff in result["paired"].items():  # type: ignore[union-attr]
        lo, hi = diff["ci"]
        print(f"paired with − without, {attr}: {diff['mean']:+.3f} (95% CI {lo:+.3f}–{hi:+.3f})")
    print(f"episodes whose pick changed: {result['changed_pick']}")
    print("retrieved per held-out chore:", json.dumps(result["retrieved"]))
    titles = {s["skill_id"]: s["title"] for s in result["skills_in_library"]}  # type: ignore[union-attr]
    print(f"library: {len(titles)} skills: {sorted(set(titles.values()))}")
    system = result["example_prompt"][0]  # type: ignore[index]
    print(f"one injected system prompt:\n---\n{system['content']}\n---")


async def main(args: argparse.Namespace) -> list[dict[str, object]]:
    results = []
    policy = HFLocalPolicy(resolve_model(args.model), decode="auto", temperature=1.0)
    results.append(await measure(args, args.model, policy))
    if args.base_url:
        remote = OpenAIChatPolicy(args.base_url, args.served_model, temperature=1.0, max_tokens=32)
        try:
            results.append(await measure(args, f"openai:{args.served_model}", remote))
        finally:
            await remote.close()
    else:
        print("\nopenai-compatible policy: not run (no --base-url endpoint configured)")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--episodes", type=int, default=96, help="held-out episodes per arm")
    parser.add_argument("--train-episodes", type=int, default=48, help="to distil skills from")
    parser.add_argument("--skills", type=int, default=3, help="skills injected per task")
    parser.add_argument(
        "--distil-from",
        choices=("train", "heldout"),
        default="train",
        help="train: lessons from the other chores (do they transfer?); heldout: from the "
        "same chores' earlier episodes, other seeds (the demo's injection round)",
    )
    parser.add_argument(
        "--relevant",
        type=float,
        default=RELEVANT,
        help="least task-to-request similarity for a skill to be injected (0: the k nearest)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint, e.g. http://h:8000/v1")
    parser.add_argument("--served-model", default="default", help="its model name")
    parser.add_argument("--out", help="write every number as JSON here")
    options = parser.parse_args()
    measured = asyncio.run(main(options))
    if options.out:
        Path(options.out).write_text(json.dumps(measured, indent=2))
        print(f"wrote {options.out}")
