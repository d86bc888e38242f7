"""CPU reference of RMSNorm (docs/ops.md, "RMSNorm"): the fused residual add, Qwen3's scale by the
weight, Qwen3-Next's ``(1 + w)`` and its gated norm, each with the roundings the models have.

Invariants: float32 arithmetic with the contract's roundings (``round_T`` to x's dtype where the
models round); 1/sqrt is two correctly rounded steps (sqrt, then the division), as the kernels
compile without fast math; the sum of squares is torch's (a stated bound, docs/ops.md, covers the
order: the kernels use a fixed one).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .numerics import sqrt_rn


def silu(z: Tensor) -> Tensor:
    """z / (1 + exp(-z)) in float32."""
    z = z.to(torch.float32)
    return z / (1.0 + torch.exp(-z))


def rms_norm(x: Tensor, weight: Tensor, residual: Tensor | None, gate: Tensor | None, epsilon: float,
             weight_offset: int = 0) -> tuple[Tensor, Tensor]:
    """(y, s): s = x + residual in x's dtype (x without one), y = the normed s (docs/ops.md)."""
    dtype = x.dtype
    if weight.shape != (x.shape[-1],):
        raise ValueError(f"RMSNorm: weight has shape {list(weight.shape)}, expected [{x.shape[-1]}]")
    s = x + residual.to(dtype) if residual is not None else x
    h = s.to(torch.float32)
    ms = (h * h).sum(-1, keepdim=True) / h.shape[-1]
    r = 1.0 / sqrt_rn(ms + torch.tensor(epsilon, dtype=torch.float32))  # correctly rounded, as __fsqrt_rn
    t = h * r
    w = weight.to(torch.float32)
    if weight_offset:
        u = (t * (1.0 + w)).to(dtype)
    else:
        u = (t.to(dtype).to(torch.float32) * w).to(dtype)
    if gate is not None:
        u = (u.to(torch.float32) * silu(gate)).to(dtype)
    return u, s


def rms_norm_f64(x: Tensor, weight: Tensor, residual: Tensor | None, gate: Tensor | None, epsilon: float,
                 weight_offset: int = 0) -> Tensor:
    """The same formula in float64 without the intermediate roundings but the sum s (tests)."""
    s = (x + residual.to(x.dtype)) if residual is not None else x
    h = s.to(torch.float64)
    t = h / torch.sqrt((h * h).mean(-1, keepdim=True) + epsilon)
    w = weight.to(torch.float64)
    u = t * (1.0 + w) if weight_offset else t * w
    if gate is not None:
        z = gate.to(torch.float64)
        u = u * z / (1.0 + torch.exp(-z))
    return u
