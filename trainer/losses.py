"""Losses: decoupled PPO-style clipped policy gradient and on-policy distillation terms.

Three policies meet per token (AReaL's decoupled objective): the *behaviour* policy that
produced the token (recorded logprob, possibly some versions old), the *proximal* policy
(the weights at the start of this update, detached) and the policy being trained. The
clipped ratio is taken against the proximal policy; the behaviour-to-proximal importance
weight corrects for staleness and is capped.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PolicyLossTerms:
    """Sums over the loss-masked tokens of one micro-batch (divide by the batch's tokens)."""

    loss_sum: torch.Tensor
    clipped_tokens: float
    behaviour_kl_sum: float
    """Σ k3(π_behaviour ‖ π_θ) per token: exp(Δ) − 1 − Δ with Δ = log π_b − log π_θ."""
    behaviour_tokens: int


def policy_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float,
    clip_high: float,
    behaviour_weight_cap: float,
) -> PolicyLossTerms:
    """Token-level decoupled clipped surrogate, summed over ``mask``.

    ``behaviour_logprobs`` may hold NaN for tokens without a recorded logprob: those are
    treated as on-policy (behaviour = proximal, weight 1).
    """
    proximal = proximal_logprobs.detach()
    recorded = ~torch.isnan(behaviour_logprobs)
    behaviour = torch.where(recorded, behaviour_logprobs, proximal)
    ratio = torch.exp(logprobs - proximal)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.minimum(ratio * advantages, clipped * advantages)
    weight = torch.exp(proximal - behaviour).clamp(max=behaviour_weight_cap)
    per_token = -weight * surrogate
    maskf = mask.float()
    with torch.no_grad():
        was_clipped = ((ratio * advantages) != surrogate) & mask
        delta = (behaviour - logprobs)[recorded & mask]
        kl = (torch.exp(delta) - 1.0 - delta).sum()
    return PolicyLossTerms(
        loss_sum=(per_token * maskf).sum(),
        clipped_tokens=float(was_clipped.sum()),
        behaviour_kl_sum=float(kl),
        behaviour_tokens=int((recorded & mask).sum()),
    )


def distill_advantages(
    advantages: torch.Tensor,
    student_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    *,
    coef: float,
    pure: bool,
) -> torch.Tensor:
    """``A_t − λ·(log π_s − log π_t)``; in pure mode ``−(log π_s − log π_t)`` alone.

    The per-token term is a one-sample estimate of the reverse KL to the teacher; as a
    (negative) advantage it pushes the student's sampled tokens toward the teacher's.
    """
    gap = (student_logprobs - teacher_logprobs).detach()
    if pure:
        return -gap
    return advantages - coef * gap


def reverse_kl(
    student_log_softmax: torch.Tensor, teacher_log_softmax: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Exact mean reverse KL ``Σ_v π_s(v)·(log π_s(v) − log π_t(v))`` over ``mask`` positions."""
    per_position = (student_log_softmax.exp() * (student_log_softmax - teacher_log_softmax)).sum(-1)
    return per_position[mask].mean()
