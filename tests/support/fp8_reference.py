"""docs/ops.md's fp8 activation format of W8A8Proj evaluated in float64 (the GPU tests' reference).

From the exactly quantized operands: per 128-k block b in order, the exact e4m3 x e4m3 products of
the block times sx[m, b] * sw[n, b] (one scale a row for row / tensor activations, one a row for
channel weights), summed in float64; and the same sum over |terms|, the per-element bound's measure
(docs/ops.md, Tolerances: the FP8 tensor core's 1e-3 of an element's sum of |terms|).
"""

from __future__ import annotations

import torch

from metrale_export.ops import w8a8
from metrale_export.ops.numerics import FP8_BLOCK, e4m3_from_bits


def fp8_float64(xq: torch.Tensor, sx: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, gran: str,
                device) -> tuple[torch.Tensor, torch.Tensor]:
    """(acc, mag) [M, N] float64 on ``device``: xq, sx from w8a8.quantize_activation, the weight's e4m3
    bits and scales of granularity ``gran``."""
    n, k = weight.shape
    a = xq.to(torch.float64).to(device)
    b = e4m3_from_bits(weight).to(torch.float64).to(device)
    sx64 = sx.to(torch.float64).to(device)
    sw = w8a8.expand_weight_scale(weight_scale, gran, n, k).to(torch.float64).to(device)
    acc = torch.zeros(a.shape[0], n, dtype=torch.float64, device=device)
    mag = torch.zeros_like(acc)
    for blk in range(-(-k // FP8_BLOCK)):
        ks = slice(blk * FP8_BLOCK, min(k, (blk + 1) * FP8_BLOCK))
        scale = sx64[:, blk if sx64.shape[1] > 1 else 0, None] * sw[None, :, blk * FP8_BLOCK]
        acc += (a[:, ks] @ b[:, ks].T) * scale
        mag += (a[:, ks].abs() @ b[:, ks].abs().T) * scale.abs()
    return acc, mag
