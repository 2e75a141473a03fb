"""The learner: one policy update from a batch of trajectories (no Kafka here)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from ..schemas import Trajectory
from .advantages import group_relative_advantages
from .config import TrainerConfig
from .distill import Teacher
from .distributed import Ranks, all_reduce_gradients, all_reduce_sums
from .losses import distill_advantages, policy_loss
from .model import Placement, token_logprobs
from .packing import MicroBatch, pack
from .transform import TrainingSequence, TrajectoryTransformer


@dataclass(frozen=True)
class UpdateMetrics:
    """What one update did."""

    trajectories: int
    sequences: int
    tokens: int
    """Non-padding tokens that went through forward and backward."""
    policy_tokens: int
    mean_reward: float
    loss: float
    behaviour_kl: float
    """Mean k3 estimate of KL(π_behaviour ‖ π_θ) over tokens with recorded logprobs."""
    clip_fraction: float
    teacher_kl: float | None
    """Mean log π_s − log π_t over the student's tokens (a reverse-KL estimate), if distilling."""
    grad_norm: float
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        """Training throughput of this update."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class Learner:
    """Holds the model and optimizer; :meth:`update` takes one optimizer step."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerFast,
        config: TrainerConfig,
        placement: Placement,
        teacher: Teacher | None = None,
        ranks: Ranks | None = None,
    ) -> None:
        self.model = model.to(placement.device).train()
        self.ranks = ranks or Ranks()
        """With several ranks, each computes its share of every mini-batch's micro-batches
        and the gradients are summed before the step (:mod:`.distributed`)."""
        self.tokenizer = tokenizer
        self.config = config
        self.placement = placement
        self.teacher = teacher
        self.transformer = TrajectoryTransformer(tokenizer, config.seq_len)
        freeze_lower(self.model, config.frozen_layers)
        self.optimizer = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad],
            lr=config.lr,
            weight_decay=config.weight_decay,
        )

    def update(self, trajectories: list[Trajectory]) -> UpdateMetrics:
        """Transform, pack, compute the loss and take one optimizer step (on every rank:
        each packs the whole batch and computes its share). The batch is taken in task
        order, not arrival order: the mini-batches, so the weights, do not depend on how
        the partitions interleaved."""
        started = time.perf_counter()
        cfg = self.config
        trajectories = sorted(trajectories, key=lambda t: (t.task_id, t.event_id))
        advantage_of = dict(
            zip(
                (t.event_id for t in trajectories),
                group_relative_advantages(
                    [t.group_id for t in trajectories],
                    [t.reward for t in trajectories],
                    normalize=cfg.normalize_advantages,
                ),
                strict=True,
            )
        )
        sequences: list[TrainingSequence] = []
        advantages: list[float] = []
        for trajectory in trajectories:
            for seq in self.transformer.transform(trajectory):
                sequences.append(seq)
                advantages.append(advantage_of[trajectory.event_id])
            if cfg.untaken_advantage:
                for seq in self.transformer.untaken(trajectory):
                    sequences.append(seq)
                    advantages.append(cfg.untaken_advantage)
        batches = pack(
            sequences,
            advantages,
            seq_len=cfg.seq_len,
            rows_per_micro_batch=cfg.rows_per_micro_batch,
            pad_id=int(self.tokenizer.pad_token_id or 0),
        )
        proximal = self._proximal_logprobs(batches) if cfg.minibatches > 1 else None
        loss_total = clipped = kl_sum = teacher_gap = grad_norm = 0.0
        kl_tokens = tokens = 0
        groups = _split(list(range(len(batches))), cfg.minibatches)
        for group in groups:
            group_policy = max(1, sum(batches[i].policy_tokens for i in group))
            self.optimizer.zero_grad(set_to_none=True)
            for i in group:
                if not self.ranks.mine(i):
                    continue
                batch = batches[i].to(self.placement.device)
                tokens += int((batch.segment_ids > 0).sum())
                with self.placement.autocast():
                    logp, _ = token_logprobs(
                        self.model,
                        batch.input_ids,
                        batch.position_ids,
                        batch.segment_ids,
                        only=batch.loss_mask,
                    )
                prox = proximal[i] if proximal is not None else logp.detach()
                assert prox is not None
                adv = batch.advantages
                if self.teacher is not None:
                    teacher_logp = self.teacher.token_logprobs(batch)
                    teacher_gap += float((prox - teacher_logp)[batch.loss_mask].sum())
                    adv = distill_advantages(
                        adv, prox, teacher_logp, coef=cfg.distill.coef, pure=cfg.distill.pure
                    )
                terms = policy_loss(
                    logp,
                    prox,
                    batch.behaviour_logprobs,
                    adv,
                    batch.loss_mask,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    behaviour_weight_cap=cfg.behaviour_weight_cap,
                )
                (terms.loss_sum / group_policy).backward()
                loss_total += float(terms.loss_sum.detach())
                clipped += terms.clipped_tokens
                kl_sum += terms.behaviour_kl_sum
                kl_tokens += terms.behaviour_tokens
            if self.ranks.distributed:
                all_reduce_gradients(self.model)
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
            )
            self.optimizer.step()
        if self.ranks.distributed:
            summed = all_reduce_sums(
                [loss_total, clipped, kl_sum, kl_tokens, tokens, teacher_gap], self.placement.device
            )
            loss_total, clipped, kl_sum, teacher_gap = summed[0], summed[1], summed[2], summed[5]
            kl_tokens, tokens = int(summed[3]), int(summed[4])
        total_policy = max(1, sum(b.policy_tokens for b in batches))
        return UpdateMetrics(
            trajectories=len(trajectories),
            sequences=len(sequences),
            tokens=tokens,
            policy_tokens=sum(b.policy_tokens for b in batches),
            mean_reward=statistics.fmean(t.reward for t in trajectories) if trajectories else 0.0,
            loss=loss_total / total_policy,
            behaviour_kl=kl_sum / kl_tokens if kl_tokens else 0.0,
            clip_fraction=clipped / total_policy,
            teacher_kl=teacher_gap / total_policy if self.teacher is not None else None,
            grad_norm=grad_norm,
            seconds=time.perf_counter() - started,
        )

    @torch.no_grad()
    def _proximal_logprobs(self, batches: list[MicroBatch]) -> list[torch.Tensor | None]:
        """Log-probs under the weights at the start of the update (the proximal policy), of
        this rank's micro-batches."""
        out: list[torch.Tensor | None] = []
        for i, cpu_batch in enumerate(batches):
            if not self.ranks.mine(i):
                out.append(None)
                continue
            batch = cpu_batch.to(self.placement.device)
            with self.placement.autocast():
                logp, _ = token_logprobs(
                    self.model,
                    batch.input_ids,
                    batch.position_ids,
                    batch.segment_ids,
                    only=batch.loss_mask,
                )
            out.append(logp)
        return out


def freeze_lower(model: PreTrainedModel, layers: int) -> None:
    """Keep the embeddings and the lower ``layers`` blocks as loaded (none when 0): no
    gradient flows below the first trained block, so their backward pass is skipped."""
    if layers == 0:
        return
    blocks = model.get_decoder().layers
    if layers >= len(blocks):
        raise ValueError(f"frozen_layers={layers}: the model has {len(blocks)} blocks; train one")
    model.get_input_embeddings().requires_grad_(False)
    for block in blocks[:layers]:
        block.requires_grad_(False)


def _split(items: list[int], parts: int) -> list[list[int]]:
    """``items`` in ``parts`` contiguous, nearly equal, non-empty groups."""
    parts = max(1, min(parts, len(items)))
    size, extra = divmod(len(items), parts)
    out, at = [], 0
    for k in range(parts):
        n = size + (1 if k < extra else 0)
        out.append(items[at : at + n])
        at += n
    return [group for group in out if group]
