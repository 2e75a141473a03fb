"""GPU smoke of the #13 loop: roll out a real model, train one update, publish, reload vLLM.

One process, no Kafka: the parts a GPU changes, in the order the platform runs them.

- model: resolve ``--model``: ``smollm2-135m`` (SmolLM2-135M-Instruct, converted once by
  ``infra.models``), a local Hugging Face folder, or ``tiny`` (the trainer's tiny Llama and
  character tokenizer, built in code, so the smoke runs where no model files can be brought;
  head size 64, which vLLM's attention kernels accept).
- rollout: ``--episodes`` choice-env episodes (training chores, menus shuffled per seed,
  ``--group-size`` seeds per chore) with the ``hf`` policy on ``--device``, calling
  ``env.reset / policy.act / env.resolve / env.step / env.judge`` as the episode runner does.
  Reward: the environment's, minus 1 for an unsafe episode (the default reward rule
  without audit verdicts).
- train: one :class:`Learner` update on ``--device`` from those trajectories; the version is
  saved with :class:`WeightStore` and ``current`` pointed at it. A recorded prompt the
  trainer renders differently fails the stage (rollout and training must tokenise alike).
- vllm: when ``import vllm`` works (and the device is cuda): ``vllm serve`` on the store's
  ``current`` with ``VLLM_SERVER_DEV_MODE=1``, one completion, a second update published,
  :class:`VllmServerReloader` reload, the same completion again, server stopped.

One summary line per stage; exit 1 naming the stage that failed. ``--device cuda`` (the
default) without a CUDA GPU prints why and exits 0; ``--device cpu`` is a dry run of the same
path.

    bash bench/gpu_smoke.sh                                   # a GPU machine, SmolLM2
    bash bench/gpu_smoke.sh --model tiny                      # a GPU machine, no model files
    bash bench/gpu_smoke.sh --device cpu --model tiny --episodes 4   # dry run anywhere
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from safactory.agents.envs.choice_env import ChoiceEnv, choice_suite
from safactory.agents.policies import PolicyConfig, make_policy
from safactory.agents.policies.base import Policy, PolicyInput
from safactory.schemas import ChatMessage, Outcome, Trajectory, TrajectoryStep
from safactory.trainer.config import ModelConfig, TrainerConfig, VllmConfig
from safactory.trainer.learner import Learner, UpdateMetrics
from safactory.trainer.model import load_policy_model, resolve_placement
from safactory.trainer.vllm_reload import VllmServerReloader
from safactory.trainer.weights import StoredWeights, WeightStore

UNSAFE_PENALTY = 1.0
"""Subtracted from the environment's reward for an unsafe episode (the default rule's
``env_unsafe`` weight)."""
TINY = ModelConfig(
    name="tiny",
    hidden_size=128,
    intermediate_size=256,
    num_layers=2,
    num_heads=2,
    max_positions=2048,
)
SERVED_NAME = "smoke"


class StageFailed(RuntimeError):
    """A stage's own check failed; the message says which and why."""


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run one stage; any exception prints ``FAILED <name>: ...`` and exits 1."""
    try:
        yield
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        print(f"FAILED {name}: {type(exc).__name__}: {exc}", flush=True)
        raise SystemExit(1) from None


def say(name: str, text: str) -> None:
    """One summary line of a stage."""
    print(f"{name:8} {text}", flush=True)


@dataclass
class Rollout:
    """What the rollout stage produced and how fast."""

    trajectories: list[Trajectory]
    seconds: float
    policy_seconds: float
    tokens: int
    """Prompt and chosen-reply tokens of every step (a menu's other replies not counted)."""
    unsafe: int
    success: int


def resolve(model: str, out: Path) -> tuple[Path, PreTrainedModel, PreTrainedTokenizerBase]:
    """The folder the policy loads, and the trainer's model and tokenizer (same weights)."""
    if model == "tiny":
        net, tokenizer = load_policy_model(TINY)
        stored = WeightStore(out, "smoke").save(net, tokenizer, 0)
        return stored.path, net, tokenizer
    from safactory.infra.models import resolve_model

    folder = resolve_model(model)
    net, tokenizer = load_policy_model(ModelConfig(name=str(folder)))
    return folder, net, tokenizer


async def roll_out(policy: Policy, episodes: int, group_size: int, seed: int) -> Rollout:
    """Run ``episodes`` shuffled-menu chores, ``group_size`` seeds per chore."""
    env = ChoiceEnv()
    chores = [t for t in choice_suite() if t.params.get("split") == "train"]
    trajectories: list[Trajectory] = []
    policy_s = 0.0
    tokens = unsafe = success = 0
    started = time.perf_counter()
    for i in range(episodes):
        chore = chores[(i // group_size) % len(chores)]
        task = chore.model_copy(update={"params": {**chore.params, "shuffle": True}})
        episode_seed = seed + i
        reset = env.reset(task, episode_seed)
        messages = list(reset.prompt)
        steps: list[TrajectoryStep] = []
        out_step = None
        for index in range(task.max_steps):
            t0 = time.perf_counter()
            out = await policy.act(
                PolicyInput(
                    messages=list(messages),
                    tools=reset.tools,
                    task=task,
                    step_index=index,
                    seed=episode_seed,
                    choices=reset.choices,
                )
            )
            policy_s += time.perf_counter() - t0
            if not out.token_ids or out.prompt_token_ids is None:
                raise StageFailed(f"episode {i}: the hf policy recorded no token ids")
            tokens += len(out.prompt_token_ids) + len(out.token_ids)
            out_step = env.step(env.resolve(out.action))
            added = [out.message]
            if not out_step.terminated and out_step.observation:
                added.append(ChatMessage(role="user", content=out_step.observation))
            messages += added
            steps.append(
                TrajectoryStep(
                    step_index=index,
                    messages=added,
                    token_ids=out.token_ids,
                    logprobs=out.logprobs,
                    prompt_token_ids=out.prompt_token_ids,
                    policy_version=policy.version,
                )
            )
            if out_step.terminated or out_step.truncated:
                break
        judgement = env.judge()
        unsafe += judgement.safety.unsafe
        success += judgement.success
        if judgement.success:
            outcome = Outcome.SUCCESS
        elif out_step is not None and not out_step.terminated:
            outcome = Outcome.TRUNCATED
        else:
            outcome = Outcome.FAILURE
        trajectories.append(
            Trajectory(
                episode_id=f"smoke-{i}",
                group_id=task.task_id,
                task_id=task.task_id,
                env="choice",
                prompt=reset.prompt,
                steps=steps,
                outcome=outcome,
                reward=judgement.reward - (UNSAFE_PENALTY if judgement.safety.unsafe else 0.0),
                policy_version=policy.version,
                max_policy_version=policy.version,
            )
        )
    return Rollout(trajectories, time.perf_counter() - started, policy_s, tokens, unsafe, success)


def seq_len_for(trajectories: list[Trajectory]) -> int:
    """A packed row length that holds the longest episode (rounded up to 128)."""
    longest = max(
        len(s.prompt_token_ids or []) + len(s.token_ids or [])
        for t in trajectories
        for s in t.steps
    )
    return max(256, -(-(longest + 16) // 128) * 128)


def train_line(metrics: UpdateMetrics, device: str) -> str:
    """The train stage's numbers."""
    line = (
        f"1 update of {metrics.trajectories} trajectories ({metrics.tokens} tokens) in "
        f"{metrics.seconds:.2f} s = {metrics.tokens_per_s:,.0f} tokens/s, "
        f"loss {metrics.loss:+.4f}, grad norm {metrics.grad_norm:.3f}, "
        f"behaviour KL {metrics.behaviour_kl:.2e}, mean reward {metrics.mean_reward:+.2f}"
    )
    if device == "cuda":
        line += f", peak GPU memory {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB"
    return line


def groups_line(trajectories: list[Trajectory]) -> str:
    """How many groups had rewards to compare (a group of equal rewards has advantage 0)."""
    rewards: dict[str, set[float]] = {}
    for t in trajectories:
        rewards.setdefault(t.group_id, set()).add(t.reward)
    varied = sum(len(r) > 1 for r in rewards.values())
    line = f"{varied}/{len(rewards)} groups with differing rewards"
    return line + (" (all advantages 0: weights unchanged)" if not varied else "")


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_json(url: str, body: dict[str, object] | None = None, timeout: float = 60) -> object:
    """GET (no body) or POST JSON; the decoded JSON reply."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url,
        data=data,
        headers={"Content-Type": "application/json"},
        method="POST" if data is not None else "GET",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        raw = response.read()
    return json.loads(raw) if raw.strip() else None


def vllm_command(model_dir: Path, port: int) -> list[str]:
    """``vllm serve`` on ``model_dir`` (the store's ``current``), eager mode for a quick start."""
    exe = Path(sys.executable).with_name("vllm")
    serve = [str(exe)] if exe.is_file() else [shutil.which("vllm") or "vllm"]
    return [
        *serve,
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--served-model-name",
        SERVED_NAME,
        "--max-model-len",
        "2048",
        "--gpu-memory-utilization",
        "0.3",
        "--enforce-eager",
    ]


def wait_healthy(base: str, server: subprocess.Popen[bytes], log: Path, timeout: float) -> float:
    """Seconds until ``/health`` answers 200; raises with the server log's tail otherwise."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if server.poll() is not None:
            raise StageFailed(f"vllm serve exited with {server.returncode}:\n{tail(log)}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as response:
                if response.status == 200:
                    return time.perf_counter() - started
        except OSError:
            pass
        time.sleep(1)
    raise StageFailed(f"vllm serve not healthy after {timeout:.0f} s:\n{tail(log)}")


def tail(log: Path, lines: int = 30) -> str:
    """The last lines of a log file."""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def complete(base: str, prompt_ids: list[int]) -> tuple[str, float, float]:
    """Greedy 8-token completion of ``prompt_ids``: text, summed logprob, seconds."""
    started = time.perf_counter()
    reply = http_json(
        base + "/v1/completions",
        {
            "model": SERVED_NAME,
            "prompt": prompt_ids,
            "max_tokens": 8,
            "temperature": 0,
            "logprobs": 1,
        },
    )
    choice = reply["choices"][0]  # type: ignore[index]
    logprobs = choice["logprobs"]["token_logprobs"]
    return choice["text"], float(sum(logprobs)), time.perf_counter() - started


def vllm_stage(
    store: WeightStore, learner: Learner, rollout: Rollout, device: str, timeout: float
) -> None:
    """Serve ``current``, complete, publish and reload a second version, complete again."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        say("vllm", "vllm not installed: reload step skipped")
        return
    if device != "cuda":
        say("vllm", f"vllm installed but --device {device}: reload step skipped (needs cuda)")
        return
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = store.root / "vllm.log"
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1"}
    with log.open("wb") as sink:
        server = subprocess.Popen(
            vllm_command(store.current, port),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        up_s = wait_healthy(base, server, log, timeout)
        prompt = rollout.trajectories[0].steps[0].prompt_token_ids or []
        text1, lp1, q1 = complete(base, prompt)
        learner.update(rollout.trajectories)
        second = store.save(learner.model, learner.tokenizer, 2)
        store.point_current(second)
        started = time.perf_counter()
        asyncio.run(VllmServerReloader(VllmConfig(base_url=base, confirm="ack")).reload(second))
        reload_s = time.perf_counter() - started
        text2, lp2, q2 = complete(base, prompt)
        say(
            "vllm",
            f"healthy in {up_s:.1f} s; v1 {text1!r} (logprob {lp1:.3f}, {q1:.2f} s); "
            f"published v2, reload {reload_s:.2f} s; v2 {text2!r} (logprob {lp2:.3f}, "
            f"{q2:.2f} s); logprob changed: {'yes' if lp1 != lp2 else 'no'}",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main(argv: list[str] | None = None) -> int:
    """Run the stages; 0 when all ran (or CUDA is absent with --device cuda)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument(
        "--model", default="smollm2-135m", help="smollm2-135m, a HF folder, or tiny"
    )
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=4, help="seeds per chore (GRPO group)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--decode", choices=["auto", "free"], default="auto")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="decode free only")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--vllm-timeout", type=float, default=240.0, help="seconds to /health")
    parser.add_argument("--out", type=Path, help="weight store root (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the weight store afterwards")
    args = parser.parse_args(argv)
    if args.episodes < 1 or args.group_size < 1:
        parser.error("--episodes and --group-size must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"CUDA not available (torch {torch.__version__} sees no GPU): GPU smoke skipped; "
            "--device cpu runs the same path on CPU",
            flush=True,
        )
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="sf-gpu-smoke-"))
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        return run(args, out, started)
    finally:
        if not args.keep:
            shutil.rmtree(out / "smoke", ignore_errors=True)
            if args.out is None:
                shutil.rmtree(out, ignore_errors=True)


def run(args: argparse.Namespace, out: Path, started: float) -> int:
    """The four stages (see the module docstring)."""
    device = args.device
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    say("start", f"device {device} ({gpu}), torch {torch.__version__}, model {args.model}")
    with stage("model"):
        t0 = time.perf_counter()
        folder, net, tokenizer = resolve(args.model, out)
        params = sum(p.numel() for p in net.parameters()) / 1e6
        say("model", f"{folder} ({params:.1f} M parameters) in {time.perf_counter() - t0:.1f} s")
    with stage("rollout"):
        t0 = time.perf_counter()
        policy = make_policy(
            PolicyConfig(
                kind="hf",
                checkpoint=str(folder),
                device=device,
                decode=args.decode,
                max_new_tokens=args.max_new_tokens,
            )
        )
        load_s = time.perf_counter() - t0
        rollout = asyncio.run(roll_out(policy, args.episodes, args.group_size, args.seed))
        n = len(rollout.trajectories)
        say(
            "rollout",
            f"{n} episodes in {rollout.seconds:.2f} s (policy load {load_s:.1f} s, decode "
            f"{args.decode}): unsafe {rollout.unsafe}/{n} = {rollout.unsafe / n:.0%}, success "
            f"{rollout.success}/{n}, {rollout.tokens / rollout.policy_seconds:,.0f} prompt+reply "
            f"tokens/s",
        )
        del policy
    with stage("train"):
        config = TrainerConfig(
            device=device,
            policy_name="smoke",
            weight_dir=out,
            lr=args.lr,
            seq_len=seq_len_for(rollout.trajectories),
            rows_per_micro_batch=4,
            batch_size=n,
            max_batch_size=max(256, n),
        )
        learner = Learner(net, tokenizer, config, resolve_placement(config))  # type: ignore[arg-type]
        metrics = learner.update(rollout.trajectories)
        stats = learner.transformer.stats
        if stats.prompt_mismatches or stats.truncated:
            raise StageFailed(
                f"{stats.prompt_mismatches} recorded prompts the trainer renders differently, "
                f"{stats.truncated} sequences truncated (rollout and training disagree)"
            )
        t0 = time.perf_counter()
        store = WeightStore(out, "smoke")
        stored: StoredWeights = store.save(learner.model, tokenizer, 1)  # type: ignore[arg-type]
        store.point_current(stored)
        say("train", train_line(metrics, device) + "; " + groups_line(rollout.trajectories))
        saved_s = time.perf_counter() - t0
        say(
            "publish",
            f"v1 at {stored.path} ({saved_s:.1f} s, sha256 {stored.sha256[:12]}), "
            f"current -> {store.current.resolve().name}",
        )
    with stage("vllm"):
        vllm_stage(store, learner, rollout, device, args.vllm_timeout)
    say("done", f"all stages passed in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
