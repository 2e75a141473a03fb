"""Async against sync training through Kafka: same machine, model and environment latency.

Simulation workers sample answers to the toy task from the latest announced weights, wait a
long-tailed (log-normal) environment latency, and produce trajectories to Kafka; the
streaming trainer consumes them under the staleness rule and publishes a version per update.

- sync: each worker runs one episode on version v, then waits for v+1; the trainer takes
  exactly the batch of version v (max_staleness 0). Every step waits for the slowest episode.
- async: workers never wait for the trainer's next version; the trainer takes every fresh
  trajectory there is (at least the batch size) per update. Two admission rules, each its
  own row (``--admission``):
  - header-only: a worker reloads when its weights lag by more than max_staleness; the
    trainer's header check skips what arrives too stale.
  - capacity: also the capacity rule (``infra.staleness``): workers start episodes on the
    latest weights and only while the trainer's announced ``consumed`` count leaves room
    for them, and for the ones in flight, to arrive fresh; else they wait. The workers
    share one controller (workers=1), each episode keyed by its worker.

``--step-seconds`` adds a fixed time to every update, modelling the step of a bigger model
(with the tiny CPU model an update takes milliseconds, so the trainer never holds rollouts
up; with a real step, async rollouts pile up while the trainer works).

``--model smollm2-135m`` runs a real one instead of the toy task: the learner is
SmolLM2-135M-Instruct (lr 5e-5, 512-token rows, 2 rows per micro-batch, the last 2 versions
kept on disk, at most 2 batches per async update), and each worker episode is one training
chore of the choice environment (menu shuffled by the episode seed) answered by the ``hf``
policy on the announced version (``decode="auto"`` scores the menu's commands). Reward +1
careful, 0 look, -1 destructive; group id: the chore (worker ``i`` runs chore ``i // 2``).
One torch thread (``--threads``): rollout and training, in one process, each keep to a core.

Printed side by side: trajectories consumed per update, seconds per update, wall-clock for
the fixed number of updates, stale trajectories skipped and their share of those the
trainer finished with (skipped / (trained + skipped)), and each async row's throughput
ratio to sync, with the seconds per update spent training and the mean seconds a worker
spends in an episode's rollout (policy and environment, waiting its turn at the shared
policy included; the version's load and the latency not). Then the trainer's tokens/s on
CPU with the default model shape (toy model only).

    python bench/trainer_async_vs_sync.py --workers 16 --updates 15
    python bench/trainer_async_vs_sync.py --admission capacity --token-rounds 0
    python bench/trainer_async_vs_sync.py --workers 16 --updates 15 --step-seconds 0.5
    python bench/trainer_async_vs_sync.py --model smollm2-135m --workers 8 --updates 3
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from safactory.agents.envs.choice_env import ChoiceEnv, choice_suite
from safactory.agents.policies.base import PolicyInput
from safactory.agents.policies.hf_local import HFLocalPolicy
from safactory.infra.config import Settings
from safactory.infra.policy_watch import PolicyWatcher
from safactory.infra.producer import EventProducer
from safactory.infra.staleness import Admission, StalenessController
from safactory.infra.topics import create_topics
from safactory.schemas import (
    ChatMessage,
    Outcome,
    PolicyVersion,
    Trajectory,
    TrajectoryStep,
    new_id,
)
from safactory.trainer.config import ModelConfig, TrainerConfig
from safactory.trainer.learner import Learner, UpdateMetrics
from safactory.trainer.model import build_model, load_policy_model, resolve_placement
from safactory.trainer.stream import StreamingTrainer
from safactory.trainer.tokenizer import build_tokenizer
from safactory.trainer.toytask import ALPHABET, make_trajectories, toy_tokenizer
from safactory.trainer.weights import load_policy

SHAPE = ModelConfig(
    hidden_size=32,
    intermediate_size=64,
    num_layers=1,
    num_heads=2,
    max_positions=32,
    alphabet=ALPHABET,
)
SMOLLM2 = "smollm2-135m"


class ToyTask:
    """The toy task (``trainer.toytask``): the tiny model, its tokenizer and sampler."""

    policy_name = "toy"
    threads = 0
    """Torch threads (0: torch's default)."""

    def __init__(self) -> None:
        self.tokenizer = toy_tokenizer()

    def config(self, batch: int) -> dict[str, Any]:
        """The trainer's knobs for this model."""
        return {
            "seq_len": 32,
            "rows_per_micro_batch": 64,
            "lr": 3e-3,
            "max_batch_size": batch * 8,
            "model": SHAPE,
        }

    def learner_parts(self) -> tuple[Any, Any]:
        """The model to train (version 0) and its tokenizer."""
        return build_model(SHAPE, len(self.tokenizer)), self.tokenizer

    def load(self, announced: PolicyVersion) -> Any:
        """The rollout policy of an announced version."""
        model, _ = load_policy(announced.uri, announced.sha256)
        return model

    async def episode(
        self, policy: Any, version: int, index: int, rng: random.Random, generator: torch.Generator
    ) -> list[Trajectory]:
        """One sampled answer to a random digit, judged."""
        trajectories, _ = make_trajectories(
            policy,
            self.tokenizer,
            version=version,
            groups=1,
            group_size=1,
            rng=rng,
            generator=generator,
            safety_penalty=1.0,
        )
        return trajectories


class ChoiceTask:
    """SmolLM2-135M-Instruct choosing from the choice environment's menus (training chores,
    shuffled per episode) with the ``hf`` policy; see the module docstring."""

    policy_name = "hf-local"
    threads = 1
    """Rollout and training share this process; one thread each keeps them off each other's
    core (two threads each on two busy cores made an episode ~10x slower here)."""

    def __init__(self) -> None:
        suite = [t for t in choice_suite() if t.params.get("split") == "train"]
        self.chores = [
            t.model_copy(update={"params": {**t.params, "shuffle": True}}) for t in suite
        ]

    def config(self, batch: int) -> dict[str, Any]:
        """The trainer's knobs: the demo's SmolLM2 profile; async takes at most 2 batches
        per update (an update's time grows with its batch)."""
        return {
            "seq_len": 512,
            "rows_per_micro_batch": 2,
            "lr": 5e-5,
            "max_batch_size": batch * 2,
            "keep_versions": 2,
            "keep_checkpoints": 1,
            "model": ModelConfig(name=SMOLLM2),
        }

    def learner_parts(self) -> tuple[Any, Any]:
        """SmolLM2-135M-Instruct (float32) and its tokenizer."""
        return load_policy_model(ModelConfig(name=SMOLLM2))

    def load(self, announced: PolicyVersion) -> Any:
        """The hf policy on the announced version's folder."""
        return HFLocalPolicy(
            announced.uri,
            version=announced.policy_version,
            decode="auto",
            max_new_tokens=16,
            name=self.policy_name,
        )

    async def episode(
        self, policy: Any, version: int, index: int, rng: random.Random, generator: torch.Generator
    ) -> list[Trajectory]:
        """Worker ``index``'s chore, a new seed (menu order) each episode."""
        task = self.chores[(index // 2) % len(self.chores)]
        seed = rng.getrandbits(31)
        env = ChoiceEnv()
        reset = env.reset(task, seed)
        out = await policy.act(
            PolicyInput(
                messages=list(reset.prompt),
                tools=reset.tools,
                task=task,
                step_index=0,
                seed=seed,
                choices=reset.choices,
            )
        )
        env.step(env.resolve(out.action))
        judged = env.judge()
        reward = -1.0 if judged.safety.unsafe else judged.reward  # careful 1, look 0
        return [
            Trajectory(
                episode_id=new_id(),
                group_id=task.task_id,
                task_id=task.task_id,
                env="choice",
                prompt=reset.prompt,
                reward=reward,
                policy_version=version,
                outcome=Outcome.SUCCESS if judged.success else Outcome.FAILURE,
                max_policy_version=version,
                steps=[
                    TrajectoryStep(
                        step_index=0,
                        messages=[out.message],
                        token_ids=out.token_ids,
                        logprobs=out.logprobs,
                        prompt_token_ids=out.prompt_token_ids,
                        policy_version=version,
                    )
                ],
            )
        ]


TASKS: dict[str, type[ToyTask] | type[ChoiceTask]] = {"toy": ToyTask, SMOLLM2: ChoiceTask}


@dataclass
class Result:
    mode: str
    admission: str
    updates: int
    consumed: int
    skipped: int
    seconds: float
    staleness: dict[int, int]
    train_seconds: float
    """Seconds the trainer spent in updates."""
    rollout_seconds: float
    """Mean seconds per episode's rollout: policy (its turn included) and environment, not
    the version's load nor the latency."""

    @property
    def per_update(self) -> float:
        return self.consumed / self.updates

    @property
    def throughput(self) -> float:
        return self.consumed / self.seconds

    @property
    def stale_share(self) -> float:
        """Skipped as stale, of the trajectories the trainer finished with."""
        return self.skipped / (self.consumed + self.skipped)


class Policies:
    """The latest announced weights, loaded once per version and shared by the workers;
    versions more than ``keep`` behind the newest loaded are let go."""

    def __init__(
        self, watcher: PolicyWatcher, name: str, load: Callable[[PolicyVersion], Any], keep: int
    ) -> None:
        self.watcher, self.name, self.load, self.keep = watcher, name, load, keep
        self.loaded: dict[int, asyncio.Task[Any]] = {}

    async def model(self, version: int) -> Any:
        if version not in self.loaded:
            announced = self.watcher.latest[self.name]
            assert announced.policy_version >= version
            self.loaded[version] = asyncio.create_task(asyncio.to_thread(self.load, announced))
            for old in [v for v in self.loaded if v < version - self.keep]:
                del self.loaded[old]
        return await self.loaded[version]


async def run_mode(args: argparse.Namespace, mode: str, rule: str = "header-only") -> Result:
    settings = Settings(topic_prefix=f"bench{uuid.uuid4().hex[:8]}.")
    await create_topics(settings)
    work = Path(tempfile.mkdtemp(prefix=f"sf-bench-{mode}-"))
    batch = args.workers
    task = TASKS[args.model]()
    cfg = TrainerConfig(
        mode=mode,
        max_staleness=args.max_staleness,
        batch_size=batch,
        policy_name=task.policy_name,
        weight_dir=work / "w",
        checkpoint_dir=work / "c",
        **task.config(batch),
    )
    model, tokenizer = task.learner_parts()
    learner = Learner(model, tokenizer, cfg, resolve_placement(cfg))
    if args.step_seconds > 0:
        learner.update = _padded(learner.update, args.step_seconds)  # type: ignore[method-assign]
    trainer = StreamingTrainer(cfg, settings, learner)
    training = asyncio.create_task(trainer.run())
    admission = StalenessController(
        max_staleness=cfg.effective_staleness,
        batch_size=batch if rule == "capacity" else None,
    )
    rollouts: list[float] = []
    stop = asyncio.Event()
    async with PolicyWatcher(settings) as watcher, EventProducer(settings) as producer:
        await watcher.wait_for(cfg.policy_name, 0)
        policies = Policies(watcher, cfg.policy_name, task.load, cfg.max_staleness)

        async def worker(index: int) -> None:
            nonlocal running
            version = 0
            generator = torch.Generator().manual_seed(args.seed * 1000 + index)
            local = random.Random(args.seed * 1000 + index)
            while not stop.is_set():
                announced = watcher.latest[cfg.policy_name]
                latest = announced.policy_version
                if mode == "sync":
                    if latest == version and index in done_at.get(version, set()):
                        await asyncio.sleep(0.005)  # each waits for the other
                        continue
                    version = latest
                else:
                    decision = admission.admit_episode(
                        version, latest, running, consumed=announced.consumed, key=index
                    )
                    if decision is Admission.RELOAD:
                        version = latest
                        continue
                    if decision is Admission.WAIT:
                        await asyncio.sleep(0.005)
                        continue
                running += 1
                policy = await policies.model(version)
                began = time.perf_counter()
                trajectories = await task.episode(policy, version, index, local, generator)
                rollouts.append(time.perf_counter() - began)
                await asyncio.sleep(
                    local.lognormvariate(math.log(args.latency_median), args.latency_sigma)
                )
                await producer.publish_many(trajectories)
                running -= 1
                admission.episode_ended(index)
                done_at.setdefault(version, set()).add(index)

        done_at: dict[int, set[int]] = {}
        running = 0
        started = time.perf_counter()
        workers = [asyncio.create_task(worker(i)) for i in range(args.workers)]
        await watcher.wait_for(cfg.policy_name, args.updates)
        seconds = time.perf_counter() - started
        consumed = trainer.state.trained_total
        skipped = trainer.staleness.skipped_total
        train_seconds = float(trainer.stats.train_seconds)
        stop.set()
        trainer.request_stop()
        await asyncio.gather(*workers)
        await training
    shutil.rmtree(work, ignore_errors=True)
    return Result(
        mode,
        rule if mode == "async" else "-",
        args.updates,
        consumed,
        skipped,
        seconds,
        dict(sorted(trainer.staleness.accepted.items())),
        train_seconds,
        statistics.fmean(rollouts),
    )


def _padded(
    update: Callable[[list[Trajectory]], UpdateMetrics], seconds: float
) -> Callable[[list[Trajectory]], UpdateMetrics]:
    """``update`` followed by a sleep: models the step time of a bigger model."""

    def padded(batch: list[Trajectory]) -> UpdateMetrics:
        metrics = update(batch)
        time.sleep(seconds)  # runs in the trainer's worker thread, as a real step would
        return metrics

    return padded


def tokens_per_second(args: argparse.Namespace) -> tuple[float, int]:
    """Trainer throughput on CPU: default model shape, full 128-token rows."""
    torch.manual_seed(args.seed)
    tokenizer = build_tokenizer()
    cfg = TrainerConfig(batch_size=32, seq_len=128, rows_per_micro_batch=8)
    learner = Learner(
        build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg)
    )
    rng = random.Random(args.seed)
    batch = []
    for i in range(cfg.batch_size):
        answer = [rng.randrange(10, len(tokenizer)) for _ in range(100)]
        batch.append(
            Trajectory(
                episode_id=f"e{i}",
                group_id=f"g{i // 8}",
                task_id="t",
                env="bench",
                prompt=[ChatMessage(role="user", content="x" * 20)],
                steps=[
                    TrajectoryStep(
                        step_index=0, token_ids=answer, logprobs=[-3.0] * 100, policy_version=0
                    )
                ],
                outcome=Outcome.SUCCESS,
                reward=float(i % 2),
                policy_version=0,
                max_policy_version=0,
            )
        )
    learner.update(batch)  # warm-up
    rates = [learner.update(batch).tokens_per_s for _ in range(args.token_rounds)]
    return statistics.median(rates), cfg.batch_size


async def main(args: argparse.Namespace) -> None:
    threads = TASKS[args.model].threads if args.threads is None else args.threads
    if threads:
        torch.set_num_threads(threads)
    latency = f"lognormal(median {args.latency_median}s, sigma {args.latency_sigma})"
    print(
        f"model={args.model} workers={args.workers} updates={args.updates} "
        f"max_staleness={args.max_staleness} latency={latency} extra step seconds="
        f"{args.step_seconds} torch threads={torch.get_num_threads()}"
    )
    rules = ["header-only", "capacity"] if args.admission == "both" else [args.admission]
    results = [await run_mode(args, "sync")]
    results += [await run_mode(args, "async", rule) for rule in rules]
    print(
        f"{'mode':6} {'admission':11} {'consumed':>9} {'per update':>11} {'s/update':>9} "
        f"{'wall s':>7} {'traj/s':>7} {'skipped':>8} {'stale %':>8} {'train s/upd':>11} "
        f"{'rollout s':>9}  staleness (lag: trained)"
    )
    for r in results:
        print(
            f"{r.mode:6} {r.admission:11} {r.consumed:9d} {r.per_update:11.1f} "
            f"{r.seconds / r.updates:9.3f} {r.seconds:7.2f} {r.throughput:7.2f} "
            f"{r.skipped:8d} {100 * r.stale_share:7.1f}% {r.train_seconds / r.updates:11.3f} "
            f"{r.rollout_seconds:9.3f}  {r.staleness}"
        )
    sync = results[0]
    for asyn in results[1:]:
        print(
            f"async ({asyn.admission}) / sync: trajectories per update "
            f"{asyn.per_update / sync.per_update:.2f}x, wall-clock for {args.updates} updates "
            f"{sync.seconds / asyn.seconds:.2f}x faster, throughput "
            f"{asyn.throughput / sync.throughput:.2f}x, stale {100 * asyn.stale_share:.1f}% "
            f"({asyn.skipped} skipped / {asyn.consumed + asyn.skipped} finished)"
        )
    if args.token_rounds and args.model == "toy":
        rate, batch = tokens_per_second(args)
        print(
            f"trainer tokens/s on CPU (default model, {batch} trajectories of 121 tokens, "
            f"median of {args.token_rounds}): {rate:,.0f} "
            f"(torch threads {torch.get_num_threads()})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        choices=sorted(TASKS),
        default="toy",
        help="toy: the toy task's tiny model; smollm2-135m: SmolLM2-135M-Instruct "
        "on the choice environment (module docstring)",
    )
    parser.add_argument("--workers", type=int, default=16, help="simulation workers (= batch)")
    parser.add_argument("--updates", type=int, default=15, help="training updates per mode")
    parser.add_argument("--max-staleness", type=int, default=2, help="async staleness bound")
    parser.add_argument("--latency-median", type=float, default=0.1, help="env seconds, median")
    parser.add_argument("--latency-sigma", type=float, default=1.2, help="log-normal sigma")
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=0.0,
        help="extra seconds per update (a bigger model's step)",
    )
    parser.add_argument(
        "--admission",
        choices=["both", "header-only", "capacity"],
        default="both",
        help="async admission rule(s), one row each",
    )
    parser.add_argument(
        "--token-rounds",
        type=int,
        default=5,
        help="updates timed for tokens/s, toy model only (0: skip)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads, 0: torch default [toy 0, smollm2-135m 1]",
    )
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
