"""W4A16Proj: int4 weights with float32 group scales (optional zero points), bf16 activations.

Quantizer (round-to-nearest from a float weight), dequantizer and the CPU reference of the op, all
following docs/ops.md. Invariants: codes are 0..15 with the zero point 8 when symmetric; the
reference rounds the dequantized weight to bf16 once and accumulates in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import contract
from .numerics import bf16_round, pack_nibbles, unpack_nibbles

GROUP_SIZES = contract.GROUP_SIZES


@dataclass(frozen=True)
class W4A16Weight:
    weight: torch.Tensor  # int8 [N, K/2]
    weight_scale: torch.Tensor  # float32 [N, K/group]
    zero_point: torch.Tensor | None  # int8 [N, K/group] or None (symmetric, 8)
    group_size: int


def quantize(w: torch.Tensor, group_size: int = 128, symmetric: bool = True) -> W4A16Weight:
    """Round-to-nearest int4 quantization of a float [N, K] weight, per row and group."""
    n, k = w.shape
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group size must be one of {GROUP_SIZES}, found {group_size}")
    if k % group_size:
        raise ValueError(f"group size {group_size} does not divide K={k}")
    g = w.to(torch.float32).reshape(n, k // group_size, group_size)
    if symmetric:
        amax = g.abs().amax(dim=-1)
        scale = torch.where(amax > 0, amax / 7.5, torch.ones_like(amax))
        # Codes 0..15 around 8: the grid is -8..7 times the scale; +-7.5 maps to the edges.
        q = torch.clamp(torch.round(g / scale[..., None]) + 8, 0, 15)
        zero = None
    else:
        lo, hi = g.amin(dim=-1), g.amax(dim=-1)
        scale = torch.where(hi > lo, (hi - lo) / 15.0, torch.ones_like(hi))
        zp = torch.clamp(torch.round(-lo / scale), 0, 15)
        q = torch.clamp(torch.round(g / scale[..., None]) + zp[..., None], 0, 15)
        zero = zp.to(torch.int8)
    codes = q.reshape(n, k).to(torch.uint8)
    return W4A16Weight(pack_nibbles(codes), scale.contiguous(), zero, group_size)


def dequantize(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
) -> torch.Tensor:
    """The contract's w[n, k] = (code - z) * s in float32 (not yet rounded to bf16)."""
    codes = unpack_nibbles(weight).to(torch.float32)
    n, k = codes.shape
    z = 8.0 if zero_point is None else zero_point.to(torch.float32).repeat_interleave(group_size, 1)
    s = weight_scale.to(torch.float32).repeat_interleave(group_size, 1)
    return (codes - z) * s


def proj(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    bias: torch.Tensor | None,
    group_size: int,
    activation_format: str = "bf16",
) -> torch.Tensor:
    """CPU reference of W4A16Proj: y = bf16(x) @ bf16(w)^T (+ bias), in the dtype of x."""
    if activation_format != "bf16":
        raise ValueError(f"W4A16Proj runs only bf16 activations, asked for {activation_format!r}")
    wb = bf16_round(dequantize(weight, weight_scale, zero_point, group_size))
    acc = bf16_round(x.to(torch.float32)) @ wb.T
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
