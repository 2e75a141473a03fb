"""Trainer throughput on 1 vs N ranks (torch.distributed, gloo on CPU), side by side.

    python bench/trainer_ranks.py [--ranks 1,2] [--updates 6] [--hidden 256]

Each arm runs ``torchrun --nproc-per-node N`` on this file: rank 0 leads as
``safactory train --nproc N`` does (:class:`~safactory.trainer.leading.RankZeroLearner`:
the batch is broadcast, every rank computes its share of the micro-batches, gradients are
summed), the others follow. Same toy-task batch, same model shape, ``OMP_NUM_THREADS`` =
cores ÷ ranks so the arms use the same cores. Printed per arm: tokens/s over the updates
after the first (which also carries the weight broadcast), and the time rank 0 spends
broadcasting each batch (the cost of the one-consumer design).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch


def _config(hidden: int, device: str) -> dict:
    from safactory.trainer.toytask import ALPHABET

    return {
        "batch_size": 32,
        "max_batch_size": 32,
        "seq_len": 64,
        "rows_per_micro_batch": 4,
        "device": device,
        "weight_dir": "/tmp/unused-w",
        "checkpoint_dir": "/tmp/unused-c",
        "model": {
            "hidden_size": hidden,
            "intermediate_size": hidden * 4,
            "num_layers": 4,
            "num_heads": 4,
            "max_positions": 64,
            "alphabet": ALPHABET,
        },
    }


def rank_main(out: Path, hidden: int, updates: int, device: str) -> None:
    """Under torchrun: lead (rank 0) or follow, and rank 0 writes the timings."""
    from safactory.trainer import distributed, leading
    from safactory.trainer.config import TrainerConfig
    from safactory.trainer.learner import Learner
    from safactory.trainer.model import build_model, resolve_placement
    from safactory.trainer.toytask import make_trajectories, toy_tokenizer

    cfg = TrainerConfig.model_validate(_config(hidden, device))
    ranks = distributed.Ranks.from_env()
    distributed.init(ranks, device)
    torch.manual_seed(0)
    tokenizer = toy_tokenizer()
    learner = Learner(
        build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg), ranks=ranks
    )
    if ranks.rank != 0:
        leading.follow(learner)
        return
    batch, _ = make_trajectories(
        learner.model,
        tokenizer,
        version=0,
        groups=8,
        group_size=4,
        rng=random.Random(1),
        generator=torch.Generator().manual_seed(1),
        safety_penalty=1.0,
    )
    leader = leading.RankZeroLearner(learner) if ranks.distributed else learner
    times, tokens, broadcast = [], [], []
    for _ in range(updates):
        started = time.perf_counter()
        metrics = leader.update(batch)
        times.append(time.perf_counter() - started)
        tokens.append(metrics.tokens)
        if ranks.distributed:
            broadcast.append(leader.last_broadcast_s)
    if ranks.distributed:
        leader.close()
    out.write_text(json.dumps({"times": times, "tokens": tokens, "broadcast": broadcast}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,2", help="comma-separated rank counts")
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=256, help="model width")
    parser.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL, a GPU a rank)")
    parser.add_argument("--rank-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_out is not None:
        rank_main(args.rank_out, args.hidden, args.updates, args.device)
        return
    cores = os.cpu_count() or 1
    print(
        f"{cores} cores, device {args.device}; model width {args.hidden}, 4 layers; "
        "32 trajectories per update"
    )
    for n in (int(r) for r in args.ranks.split(",")):
        out = Path(tempfile.mkdtemp(prefix="sf-ranks-")) / "result.json"
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, cores // n))}
        subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={n}",
                "-m",
                "safactory.bench.trainer_ranks",
                "--rank-out",
                str(out),
                "--updates",
                str(args.updates),
                "--hidden",
                str(args.hidden),
                "--device",
                args.device,
            ],
            env=env,
            check=True,
        )
        result = json.loads(out.read_text())
        steady = result["times"][1:] or result["times"]
        tokens = result["tokens"][1:] or result["tokens"]
        rate = sum(tokens) / sum(steady)
        cast = result["broadcast"][1:]
        cast_ms = f"{1000 * sum(cast) / len(cast):.1f} ms" if cast else "-"
        print(
            f"  {n} rank(s): {rate:,.0f} tokens/s, {1000 * sum(steady) / len(steady):.0f} ms per "
            f"update, batch broadcast {cast_ms}"
        )


if __name__ == "__main__":
    main()
