"""The trainer across ranks: ``torch.distributed`` under ``torchrun`` (gloo on CPU, NCCL on
GPU, HCCL on NPU).

Rank 0 is the streaming trainer as on one process — the one consumer of trajectories, the
staleness rule, the checkpoint with the consumed offsets, the announcements — and each
update it chose is broadcast to every rank (``leading.py``). Every rank packs the same batch
the same way and takes its share of each mini-batch's micro-batches
(``i % world == rank``); the gradients are summed across ranks before clipping and the
optimizer step, so every rank takes the same step and the update equals the one-process
update on the same batch (up to the order of float sums). The other ranks only follow
(``leading.follow``): they never touch Kafka or the checkpoint. Before its first update rank 0
sends its weights and optimizer state (resumed from the checkpoint, or fresh), so a
restarted group starts identical.

Why one consumer rather than partitions split by rank: the trainer's exactness (each
trajectory trained once across kills) rests on one ledger of offsets checkpointed with the
model; ranks consuming partitions of their own would need their batches agreed and their
ledgers checkpointed together, for a batch that is small next to the forward and backward
passes it feeds (docs/DECISIONS.md).
"""

from __future__ import annotations

import datetime
import logging
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.rendezvous import rendezvous

log = logging.getLogger(__name__)
BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}


@dataclass(frozen=True)
class Ranks:
    """This process's place in the group (one process: rank 0 of 1)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        """More than one rank."""
        return self.world > 1

    @classmethod
    def from_env(cls) -> Ranks:
        """The ranks ``torchrun`` set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``)."""
        return cls(
            int(os.environ.get("RANK", "0")),
            int(os.environ.get("WORLD_SIZE", "1")),
            int(os.environ.get("LOCAL_RANK", "0")),
        )

    def mine(self, index: int) -> bool:
        """Whether micro-batch ``index`` is this rank's."""
        return index % self.world == self.rank


def init(ranks: Ranks, device: str, timeout_s: float = 600.0) -> None:
    """Join the process group for ``device``'s backend (environment set by ``torchrun``)."""
    if not ranks.distributed or dist.is_initialized():
        return
    backend = BACKENDS.get(device)
    if backend is None:
        raise RuntimeError(f"device={device!r}: no torch.distributed backend (use cpu or cuda)")
    if device == "cuda":
        torch.cuda.set_device(ranks.local_rank)
    timeout = datetime.timedelta(seconds=timeout_s)
    store, rank, world = next(rendezvous("env://", ranks.rank, ranks.world, timeout=timeout))
    # Keys of this attempt only: after torchrun restarted a failed group, gloo read the dead
    # rank's address from the previous attempt's keys and failed to connect (1 run in 6;
    # pytorch/pytorch#167288).
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.PrefixStore(f"safactory/attempt-{attempt}", store)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def all_reduce_gradients(model: torch.nn.Module) -> None:
    """Sum every parameter's gradient across ranks (a rank that had no micro-batch adds
    zeros), in one flat buffer."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    at = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[at : at + n].view_as(p.grad))
        at += n


def all_reduce_sums(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums of ``values`` across ranks."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return [float(v) for v in tensor.tolist()]
