"""RMSNorm as Qwen3 computes it: in float32, scaled by the weight after casting back.

Invariant: ``mean_square`` gives every row the same bits whatever the other rows of the batch. On a
CUDA tensor in eager mode it sums in a fixed pairwise order built from elementwise additions only
(torch's GPU reductions choose their split by the tensor's shape, so ``pow(2).mean(-1)`` of a row
alone and inside a batch can differ in the last bit, measured on the H200: 5 of 33 rows at K=256).
Elsewhere (CPU, and the traced graph that export writes) it is ``pow(2).mean(-1)``, unchanged.
"""

from __future__ import annotations

import torch
from torch import nn


def row_invariant_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis (kept, size 1) by pairwise halving: elementwise additions only, so
    each row's result depends on that row alone, on any device."""
    n = t.shape[-1]
    while n > 1:
        h = n // 2
        head = t[..., :h] + t[..., h:2 * h]
        t = torch.cat((head, t[..., 2 * h:]), dim=-1) if n % 2 else head
        n = h + n % 2
    return t


def mean_square(h: torch.Tensor) -> torch.Tensor:
    """mean(h^2) over the last axis, keepdim; row-invariant on CUDA in eager mode (see above)."""
    if h.is_cuda and not torch.compiler.is_compiling():
        return row_invariant_sum(h * h) / h.shape[-1]
    return h.pow(2).mean(-1, keepdim=True)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.empty(size, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(mean_square(h) + self.eps)
        return self.weight * h.to(dtype)
