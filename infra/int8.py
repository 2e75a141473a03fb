"""Int8 linear layers for CPU inference: int8 weights per output channel, int8 activations
per row, an exact int32 product (``torch._int_mm``), rescaled to float32.

Written here rather than with ``torch.ao.quantization.quantize_dynamic``, which is deprecated
(its warning announces removal) and scales activations per tensor, so a text's result there
would depend on the other texts in its batch.
"""

from __future__ import annotations

import torch


class Int8Linear(torch.nn.Module):
    """A ``Linear`` computed as an int8 × int8 → int32 product (``torch._int_mm``).

    Weights: symmetric int8 per output channel. Inputs: symmetric int8 per row (token), so
    each row's result depends on that row alone."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0
        quantised = torch.round(weight / scale[:, None]).to(torch.int8)
        self.register_buffer("weight_t", quantised.t().contiguous())
        self.register_buffer("weight_scale", scale)
        bias = linear.bias.detach().float() if linear.bias is not None else torch.zeros(len(scale))
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T + bias`` for ``x`` of shape ``(..., in_features)``."""
        rows = x.reshape(-1, x.shape[-1])
        row_scale = rows.abs().amax(dim=1, keepdim=True).clamp_min_(1e-12).div_(127.0)
        quantised = rows.div(row_scale).round_().to(torch.int8)
        out = torch._int_mm(quantised, self.weight_t).float()
        out.mul_(row_scale).mul_(self.weight_scale).add_(self.bias)
        return out.view(*x.shape[:-1], out.shape[-1])


def quantise_linears(module: torch.nn.Module) -> torch.nn.Module:
    """Replace every ``nn.Linear`` inside ``module`` by an :class:`Int8Linear` (in place)."""
    for name, child in module.named_children():
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, Int8Linear(child))
        else:
            quantise_linears(child)
    return module
