"""The trainer on torch.distributed (gloo, 2 CPU ranks under torchrun): the update two
ranks take equals the one-process update on the same batch, and every rank ends with the
same weights although each started from its own."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import Trajectory
from safactory.trainer.checkpoint import TrainingJournal
from safactory.trainer.config import TrainerConfig
from safactory.trainer.learner import Learner
from safactory.trainer.model import build_model, resolve_placement
from safactory.trainer.toytask import ALPHABET, make_trajectories, toy_tokenizer

SHAPE = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "max_positions": 32,
    "alphabet": ALPHABET,
}
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _config(tmp_path: Path) -> TrainerConfig:
    return TrainerConfig.model_validate(
        {
            "batch_size": 16,
            "max_batch_size": 16,
            "seq_len": 32,
            "rows_per_micro_batch": 2,  # several micro-batches per mini-batch: both ranks work
            "minibatches": 2,
            "weight_dir": tmp_path / "w",
            "checkpoint_dir": tmp_path / "c",
            "model": SHAPE,
        }
    )


def _learner(cfg: TrainerConfig, seed: int) -> Learner:
    torch.manual_seed(seed)
    tokenizer = toy_tokenizer()
    return Learner(build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg))


def test_two_ranks_take_the_one_process_update(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    sampler = _learner(cfg, 7)
    batch, _ = make_trajectories(
        sampler.model,
        sampler.tokenizer,
        version=0,
        groups=4,
        group_size=4,
        rng=random.Random(3),
        generator=torch.Generator().manual_seed(3),
        safety_penalty=1.0,
    )
    (tmp_path / "batch.jsonl").write_text("\n".join(t.model_dump_json() for t in batch))
    (tmp_path / "config.json").write_text(cfg.model_dump_json())
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(SUPPORT / "dist_update.py"),
            str(tmp_path / "batch.jsonl"),
            str(tmp_path / "config.json"),
            str(tmp_path),
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr

    alone = _learner(cfg, 100)  # rank 0's starting weights
    for _ in range(2):
        metrics = alone.update(batch)
    expected = alone.model.state_dict()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1)]
    for name, tensor in expected.items():
        for state in ranks:
            torch.testing.assert_close(state[name], tensor, rtol=1e-5, atol=1e-6, msg=name)
    moved = any(
        not torch.equal(_learner(cfg, 100).model.state_dict()[n], t) for n, t in expected.items()
    )
    assert moved, "the update changed nothing: the comparison would prove nothing"
    reported = json.loads((tmp_path / "metrics.json").read_text())
    assert reported["tokens"] == metrics.tokens  # summed over ranks: the whole batch
    assert abs(reported["loss"] - metrics.loss) < 1e-5


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _rank_of(pid: int) -> int | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    ranks = [v[len(b"RANK=") :] for v in environ if v.startswith(b"RANK=")]
    return int(ranks[0]) if ranks else None


@pytest.mark.integration
async def test_a_killed_rank_is_restarted_and_nothing_is_lost_or_trained_twice(
    topics: Settings, tmp_path: Path, producer: EventProducer
) -> None:
    produced: list[Trajectory] = []
    sampler = _learner(_config(tmp_path), 7)
    for start in range(0, 160, 8):
        batch, _ = make_trajectories(
            sampler.model,
            sampler.tokenizer,
            version=0,
            groups=2,
            group_size=4,
            rng=random.Random(start),
            generator=torch.Generator().manual_seed(start),
            safety_penalty=1.0,
        )
        produced += batch
    await producer.publish_many(produced)
    config = tmp_path / "trainer.toml"
    config.write_text(
        "[trainer]\nmode = 'async'\nmax_staleness = 1000\nbatch_size = 8\nmax_batch_size = 8\n"
        "rows_per_micro_batch = 2\n"
        f"seq_len = 32\nweight_dir = '{tmp_path / 'w'}'\ncheckpoint_dir = '{tmp_path / 'c'}'\n"
        "[trainer.model]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in SHAPE.items())
    )
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": topics.kafka_bootstrap,
        "SF_TOPIC_PREFIX": topics.topic_prefix,
        "OMP_NUM_THREADS": "1",
    }
    command = [sys.executable, "-m", "safactory.cli.main", "train", "--config", str(config)]
    command += ["--no-live", "--idle-exit", "6", "--nproc", "2", "--max-restarts", "2"]
    journal = TrainingJournal(tmp_path / "c")
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    killed = None
    async with asyncio.timeout(240):
        while killed is None and process.returncode is None:
            await asyncio.sleep(0.05)
            if len(journal.entries()) >= 4:  # mid-run: some updates taken, most to come
                followers = [p for p in _children(process.pid) if _rank_of(p) == 1]
                if followers:
                    os.kill(followers[0], signal.SIGKILL)
                    killed = followers[0]
        output = (await process.communicate())[0].decode()
    assert killed is not None, output
    assert process.returncode == 0, output
    entries = journal.entries()
    trained = [e for entry in entries for e in entry["trained"]]
    assert len(trained) == len(set(trained)), "a trajectory was trained twice"
    assert set(trained) == {t.episode_id for t in produced}, "a trajectory was lost"
    assert len(entries) > 4  # training went on after the restart
