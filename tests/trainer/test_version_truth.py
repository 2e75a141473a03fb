"""Version truth on the remote path, against the real broker and a real model server.

The trainer announces a version only once the inference server (``safactory model-server``,
a real HTTP process serving the weight store's ``current``) confirms loading it; a reload
that fails leaves the old version announced, with the reason; the OpenAI-compatible policy
stamps each step with the version the server reports, never the one it was told about.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import httpx
import pytest
import torch
from model_server import model_server

from safactory.agents.envs.choice_env import ChoiceEnv
from safactory.agents.policies.openai_chat import OpenAIChatPolicy
from safactory.agents.runner import EpisodeRunner
from safactory.infra.config import Settings
from safactory.infra.policy_watch import PolicyWatcher
from safactory.infra.producer import EventProducer
from safactory.schemas import Event, PolicyVersion, Step, Task, Trajectory
from safactory.streams.monitor import Follower, LiveView
from safactory.trainer.config import ModelConfig, TrainerConfig
from safactory.trainer.learner import Learner
from safactory.trainer.model import build_model, resolve_placement
from safactory.trainer.stream import StreamingTrainer
from safactory.trainer.toytask import ALPHABET, make_trajectories, toy_tokenizer

SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "max_positions": 512,
    "alphabet": ALPHABET,
}


def _batch(version: int, seed: int) -> list[Trajectory]:
    tokenizer = toy_tokenizer()
    batch, _ = make_trajectories(
        build_model(ModelConfig(**SHAPE), len(tokenizer)),
        tokenizer,
        version=version,
        groups=1,
        group_size=4,
        rng=random.Random(seed),
        generator=torch.Generator().manual_seed(seed),
        safety_penalty=1.0,
    )
    return batch


class _Kept:
    """Publishes to the broker and keeps what it sent."""

    def __init__(self, producer: EventProducer) -> None:
        self.producer, self.sent = producer, []

    async def publish(self, event: Event) -> object:
        self.sent.append(event)
        return await self.producer.publish(event)


async def _episode(policy: OpenAIChatPolicy, publisher: _Kept, seed: int) -> Step:
    env = ChoiceEnv()
    spec = ChoiceEnv.suite()[0]
    task = Task(task_id=f"t{seed}", env="choice", seed=seed)
    await EpisodeRunner(publisher, policy).run(env, task, spec)
    return next(e for e in reversed(publisher.sent) if isinstance(e, Step))


async def _served(http: httpx.AsyncClient) -> int:
    [model] = (await http.get("/v1/models")).json()["data"]
    return int(model["sf_revision"]["policy_version"])


async def _announcement(watcher: PolicyWatcher, test) -> PolicyVersion:
    async with asyncio.timeout(90):
        while True:
            latest = watcher.latest.get("toy")
            if latest is not None and test(latest):
                return latest
            await asyncio.sleep(0.05)


@pytest.mark.integration
async def test_only_confirmed_versions_are_announced_and_steps_carry_the_served_one(
    topics: Settings, tmp_path: Path
) -> None:
    weights = tmp_path / "w"
    token = "version-truth-" + "t" * 16  # the reload drill needs the server's token
    log = tmp_path / "server.log"
    with model_server(weights / "toy" / "current", "toy", log, "--wait", token=token) as base:
        http = httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"})
        assert (await http.get("/v1/models")).json()["data"] == []  # nothing published yet
        cfg = TrainerConfig.model_validate(
            {
                "policy_name": "toy",
                "batch_size": 4,
                "max_batch_size": 4,
                "max_staleness": 4,
                "seq_len": 32,
                "weight_dir": weights,
                "checkpoint_dir": tmp_path / "c",
                "model": SHAPE,
                "vllm": {"enabled": True, "base_url": base, "token": token},
            }
        )
        tokenizer = toy_tokenizer()
        learner = Learner(
            build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg)
        )
        trainer = StreamingTrainer(cfg, topics, learner)
        training = asyncio.create_task(trainer.run(idle_timeout=30.0))
        policy = OpenAIChatPolicy(
            f"{base}/v1", "toy", api_key=token, max_tokens=4, reload_wait_s=1.0
        )
        try:
            async with EventProducer(topics) as producer, PolicyWatcher(topics) as watcher:
                publisher = _Kept(producer)
                v0 = await _announcement(watcher, lambda p: True)
                assert (v0.policy_version, v0.trainer_version, v0.reload_error) == (0, None, None)
                assert await _served(http) == 0  # confirmed before it was announced
                assert (await _episode(policy, publisher, 1)).policy_version == 0

                # The server refuses the next reload: v1 is trained and stored, not served.
                (await http.post("/v1/admin/fail_reloads", json={"count": 1})).raise_for_status()
                await producer.publish_many(_batch(0, seed=1))
                held = await _announcement(watcher, lambda p: p.trainer_version == 1)
                assert held.policy_version == 0 and held.sha256 == v0.sha256
                assert "refused" in (held.reload_error or "")
                assert held.consumed == 4  # admission still counts what was trained on
                assert trainer.stats.reload_errors == 1 and trainer.stats.served_version == 0
                assert await _served(http) == 0
                view = LiveView()  # what `safactory monitor` and `serve` show
                follower = Follower(topics, view)
                await follower.start()
                try:
                    async with asyncio.timeout(30):
                        while True:
                            if "toy" in view.policies:
                                break
                            await asyncio.sleep(0.05)
                finally:
                    await follower.stop()
                shown = view.snapshot()["policies"]["toy"]["shown"]
                assert shown.startswith("toy v0 (trainer at v1, not served: ")

                # Told of v1 (what the old trainer announced), the policy asks the server.
                told = v0.model_copy(update={"policy_version": 1})
                await policy.reload(told)
                assert policy.version == 0
                step = await _episode(policy, publisher, 2)
                assert step.policy_version == 0  # the weights that wrote it

                # The next reload succeeds: v2 is announced, served and stamped.
                await producer.publish_many(_batch(0, seed=2))
                v2 = await _announcement(watcher, lambda p: p.policy_version == 2)
                assert (v2.trainer_version, v2.reload_error) == (None, None)
                assert await _served(http) == 2
                await policy.reload(v2)
                assert policy.version == 2
                assert (await _episode(policy, publisher, 3)).policy_version == 2
        finally:
            trainer.request_stop()
            await training
            await policy.close()
            await http.aclose()
