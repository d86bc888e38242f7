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


# Weight rows widened to float32 at a time: a [151936, 4096] lm_head widened whole took 2.4 GiB, the
# largest allocation of an 8B comparison. Each output column is one row's dot product. A slice of a
# multiple of _CHUNK_ROWS rows keeps the CPU GEMM's column blocks where the whole product has them,
# and measured here gave the whole product's bits (slices of 1000 or 1500 rows did not: a block
# tail moves); tests/ops/test_float_proj.py checks the values.
_CHUNK_BYTES = 64 << 20
_CHUNK_ROWS = 3072  # a multiple of every power-of-two and 48/96-wide column block


def proj(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """CPU reference of FloatProj."""
    if weight.dtype != WEIGHT_DTYPE:
        raise ValueError(f"FloatProj takes a bfloat16 weight, found {weight.dtype}")
    n, k = weight.shape
    xb = bf16_round(x.to(torch.float32))
    rows = max(_CHUNK_ROWS, _CHUNK_BYTES // (4 * max(k, 1)) // _CHUNK_ROWS * _CHUNK_ROWS)
    if rows >= n:
        acc = xb @ weight.to(torch.float32).T
    else:
        acc = torch.empty(*xb.shape[:-1], n, dtype=torch.float32)
        for n0 in range(0, n, rows):  # x as it is: a [B, S, K] product may take another path than [B*S, K]
            acc[..., n0:n0 + rows] = xb @ weight[n0:n0 + rows].to(torch.float32).T
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
