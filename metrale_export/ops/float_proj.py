"""CPU reference of FloatProj (docs/ops.md, "FloatProj"): W4A16's bf16 arithmetic on a bf16 weight.

Invariant: y = bf16(x) @ w^T (+ bias) accumulated in float32, in the dtype of x; the weight is
bfloat16 (rounded once at export from the checkpoint's float weight, ``store_weight``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .numerics import bf16_round

WEIGHT_DTYPE = torch.bfloat16


def store_weight(w: Tensor) -> Tensor:
    """A checkpoint's float weight as FloatProj stores it: one RNE rounding to bfloat16."""
    return w.to(torch.float32).to(WEIGHT_DTYPE).contiguous()


def proj(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """CPU reference of FloatProj."""
    if weight.dtype != WEIGHT_DTYPE:
        raise ValueError(f"FloatProj takes a bfloat16 weight, found {weight.dtype}")
    acc = bf16_round(x.to(torch.float32)) @ weight.to(torch.float32).T
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
