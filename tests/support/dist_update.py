"""One update under ``torchrun``, the way ``safactory train --nproc N`` takes it: rank 0
leads (:class:`RankZeroLearner`), the others follow. Each rank starts from weights of its
own seed (rank 0's are the ones that must win) and saves what it ends with.

    python -m torch.distributed.run --standalone --nproc-per-node 2 dist_update.py \
        BATCH.jsonl CONFIG.json OUT_DIR UPDATES
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from safactory.schemas import Trajectory
from safactory.trainer import distributed, leading
from safactory.trainer.config import TrainerConfig
from safactory.trainer.learner import Learner
from safactory.trainer.model import build_model, resolve_placement
from safactory.trainer.toytask import toy_tokenizer


def main() -> None:
    batch_file, config_file, out, updates = sys.argv[1:5]
    batch = [
        Trajectory.model_validate_json(line) for line in Path(batch_file).read_text().splitlines()
    ]
    cfg = TrainerConfig.model_validate(json.loads(Path(config_file).read_text()))
    ranks = distributed.Ranks.from_env()
    distributed.init(ranks, "cpu")
    torch.manual_seed(100 + ranks.rank)
    tokenizer = toy_tokenizer()
    learner = Learner(
        build_model(cfg.model, len(tokenizer)), tokenizer, cfg, resolve_placement(cfg), ranks=ranks
    )
    if ranks.rank == 0:
        leader = leading.RankZeroLearner(learner)
        for _ in range(int(updates)):
            metrics = leader.update(batch)
        leader.close()
        Path(out, "metrics.json").write_text(
            json.dumps({"loss": metrics.loss, "tokens": metrics.tokens})
        )
    else:
        leading.follow(learner)
    torch.save(learner.model.state_dict(), Path(out) / f"rank{ranks.rank}.pt")


if __name__ == "__main__":
    main()
