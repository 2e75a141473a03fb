"""The streaming trainer against the real broker: staleness by header, restart exactness."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from pathlib import Path

import pytest
import torch
from topic_records import collect

from safactory.infra.config import Settings
from safactory.infra.policy_watch import PolicyWatcher
from safactory.infra.producer import EventProducer
from safactory.schemas import DeadLetter, Trajectory
from safactory.schemas import headers as h
from safactory.trainer.checkpoint import CheckpointStore, TrainerState, TrainingJournal
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
    "max_positions": 32,
    "alphabet": ALPHABET,
}


def _batch(version: int, n: int, seed: int) -> list[Trajectory]:
    tokenizer = toy_tokenizer()
    model = build_model(ModelConfig(**SHAPE), len(tokenizer))
    batch, _ = make_trajectories(
        model,
        tokenizer,
        version=version,
        groups=n // 4,
        group_size=4,
        rng=random.Random(seed),
        generator=torch.Generator().manual_seed(seed),
        safety_penalty=1.0,
    )
    return batch


@pytest.mark.integration
async def test_staleness_is_exact_at_the_boundary_and_read_from_headers(
    topics: Settings, tmp_path: Path
) -> None:
    cfg = TrainerConfig.model_validate(
        {
            "mode": "async",
            "max_staleness": 2,
            "batch_size": 4,
            "max_batch_size": 4,
            "seq_len": 32,
            "weight_dir": tmp_path / "w",
            "checkpoint_dir": tmp_path / "c",
            "model": SHAPE,
            "eval_tasks": "^heldout-",
        }
    )
    tokenizer = toy_tokenizer()
    learner = Learner(
        build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg)
    )
    trainer = StreamingTrainer(cfg, topics, learner)
    task = asyncio.create_task(trainer.run(idle_timeout=3.0))
    async with asyncio.timeout(90):
        async with EventProducer(topics) as producer, PolicyWatcher(topics) as watcher:
            for version in range(3):  # three updates on fresh data: the trainer reaches v=3
                await watcher.wait_for("toy", version)
                await producer.publish_many(_batch(version, 4, seed=version))
            await watcher.wait_for("toy", 3)
            boundary = _batch(1, 4, seed=10)  # m = v − max_staleness = 1: used
            too_old = _batch(0, 4, seed=11)  # one less: skipped and counted
            # A stale record is judged by its header alone: its payload is never decoded.
            await (
                await producer.send_raw(
                    topics.topic("trajectories"),
                    key=b"g",
                    value=b"not json at all",
                    headers=[
                        (h.SCHEMA, b"trajectory/1"),
                        (h.POLICY_VERSION, b"0"),
                        (h.EPISODE, b"undecodable-but-stale"),
                    ],
                )
            )
            # A fresh record that does not decode goes to the dead-letter topic.
            await (
                await producer.send_raw(
                    topics.topic("trajectories"),
                    key=b"g",
                    value=b"{}",
                    headers=[(h.SCHEMA, b"trajectory/1"), (h.POLICY_VERSION, b"3")],
                )
            )
            # So does one recorded with another tokenizer (ids outside the vocabulary).
            alien = _batch(3, 4, seed=12)[0]
            step = alien.steps[0].model_copy(update={"token_ids": [999], "logprobs": [-1.0]})
            await producer.publish(alien.model_copy(update={"steps": [step]}))
            # Evaluation episodes (eval_tasks): read, never trained on, counted as consumed.
            held_out = [
                t.model_copy(update={"task_id": f"heldout-{t.task_id}"})
                for t in _batch(3, 4, seed=13)[:3]
            ]
            await producer.publish_many(held_out)
            await producer.publish_many(too_old)  # acknowledged before the boundary batch is sent
            await producer.publish_many(boundary)
            announced = await watcher.wait_for("toy", 4)
    stats = await asyncio.wait_for(task, 30)
    assert trainer.version == 4
    assert trainer.staleness.skipped == {3: 5}
    assert trainer.staleness.accepted == {0: 12, 2: 4}
    assert stats.skipped_stale == 5 and stats.dead_lettered == 2 and stats.held_out == 3
    # what the workers' capacity rule counts against: trained on, skipped or held out
    assert (announced.trained_on, announced.consumed) == (16, 24)
    journal = TrainingJournal(cfg.checkpoint_dir).entries()
    trained = [e for entry in journal for e in entry["trained"]]
    skipped = [e for entry in journal for e in entry["skipped"]]
    assert set(trained[-4:]) == {t.episode_id for t in boundary}
    assert sorted(skipped) == sorted([t.episode_id for t in too_old] + ["undecodable-but-stale"])
    # both left by the consumer runtime's one dead-letter path, which names the group
    dead = await _dead_letters(topics, 2)
    assert sorted(d.error.split(":")[0] for d in dead) == ["decode", "trajectory"]
    assert {d.origin_group for d in dead} == {topics.group("trainer")}


async def _dead_letters(settings: Settings, count: int) -> list[DeadLetter]:
    """The first ``count`` records of the dead-letter topic."""
    found: list[DeadLetter] = []
    records = await collect(settings, settings.topic("dlq"), lambda rs: len(rs) >= count, 30)
    found += [DeadLetter.from_record(r.key, r.value, r.headers) for r in records]
    return found


@pytest.mark.integration
async def test_killed_trainer_resumes_without_duplicates_or_gaps(
    topics: Settings, tmp_path: Path, producer: EventProducer
) -> None:
    rng = random.Random(5)
    produced: list[Trajectory] = []
    for start in range(0, 240, 8):  # version lags the position; some lag too far (stale)
        lag = rng.choice([0, 0, 0, 1, 3])
        produced += _batch(max(0, start // 8 - lag), 8, seed=start)
    await producer.publish_many(produced)
    config = tmp_path / "trainer.toml"
    config.write_text(
        "[trainer]\nmode = 'async'\nmax_staleness = 1\nbatch_size = 8\nmax_batch_size = 8\n"
        f"seq_len = 32\nweight_dir = '{tmp_path / 'w'}'\ncheckpoint_dir = '{tmp_path / 'c'}'\n"
        "[trainer.model]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in SHAPE.items())
    )
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": topics.kafka_bootstrap,
        "SF_TOPIC_PREFIX": topics.topic_prefix,
    }
    command = [
        sys.executable,
        "-m",
        "safactory.cli.main",
        "train",
        "--config",
        str(config),
        "--no-live",
        "--idle-exit",
        "4",
    ]
    journal = TrainingJournal(tmp_path / "c")
    for lines in (4, 12):  # kill mid-run twice, at different points of the stream
        await _kill_after(command, env, journal, lines)
        at_kill = journal.entries()
        assert 0 < sum(len(e["trained"]) + len(e["skipped"]) for e in at_kill) < len(produced)
    await _run_to_idle(command, env)  # resumes; ends with < 8 fresh trajectories left pending
    await _run_to_idle([*command, "--batch-size", "1"], env)  # the pending ones were kept
    entries = journal.entries()
    trained = [e for entry in entries for e in entry["trained"]]
    skipped = [e for entry in entries for e in entry["skipped"]]
    assert len(trained) == len(set(trained)), "a trajectory was trained twice"
    assert not set(trained) & set(skipped)
    assert set(trained) | set(skipped) == {t.episode_id for t in produced}, "a gap"
    assert skipped, "the data was meant to contain stale trajectories"
    store = CheckpointStore(tmp_path / "c")
    latest = store.latest()
    assert latest is not None
    state = TrainerState.from_json(json.loads((latest / "state.json").read_text()))
    assert sum(state.skipped.values()) == len(skipped)
    assert state.trained_total == len(trained)


async def _kill_after(
    command: list[str], env: dict[str, str], journal: TrainingJournal, lines: int
) -> None:
    """Start the trainer and SIGKILL it once the journal has ``lines`` lines."""
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    async with asyncio.timeout(120):
        while len(journal.entries()) < lines and process.returncode is None:  # noqa: ASYNC110 (a file another process writes)
            await asyncio.sleep(0.02)
    if process.returncode is None:
        process.send_signal(signal.SIGKILL)
    output = (await process.communicate())[0].decode()
    assert process.returncode == -signal.SIGKILL, output


async def _run_to_idle(command: list[str], env: dict[str, str]) -> None:
    process = await asyncio.create_subprocess_exec(
        *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    async with asyncio.timeout(180):
        output = (await process.communicate())[0].decode()
    assert process.returncode == 0, output


async def test_ledger_counts_what_the_consumer_handed_over_but_the_buffer(
    settings: Settings, tmp_path: Path
) -> None:
    """Offsets below a batch's end are finished (skipped, dead-lettered, or no record there)
    except buffered trajectories; those of a revoked partition are dropped, not finished."""
    from aiokafka import TopicPartition

    from safactory.trainer.stream import _Pending

    cfg = TrainerConfig.model_validate(
        {
            "seq_len": 32,
            "weight_dir": tmp_path / "w",
            "checkpoint_dir": tmp_path / "c",
            "model": SHAPE,
        }
    )
    tokenizer = toy_tokenizer()
    learner = Learner(
        build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg)
    )
    trainer = StreamingTrainer(cfg, settings, learner)
    tp = TopicPartition(trainer.topic, 0)
    item = _batch(0, 4, seed=1)[0]
    trainer._buffer = [_Pending(item, 0, offset, 0, 0.0) for offset in (3, 7)]
    trainer._read_to({tp: 10})
    progress = trainer.ledger.progress(0)
    assert (progress.watermark, progress.done_above) == (3, {4, 5, 6, 8, 9})
    await trainer._release({tp})
    assert trainer._buffer == [] and not trainer.ledger.is_done(0, 3)
    await trainer._consumer._consumer.stop()  # never started; closed all the same
