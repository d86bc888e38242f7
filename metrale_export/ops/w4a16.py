"""W4A16Proj (op version 2): int4 weights with bfloat16 group scales (optional zero points), bf16
activations.

Quantizer (round-to-nearest from a float weight), dequantizer and the CPU reference of the op, all
following docs/ops.md. Invariants: codes are 0..15 with the zero point 8 when symmetric; group
scales are stored as bfloat16, rounded once from whatever precision they were found or computed in
(``store_scale``, the one place that rounding happens: quantizers apply it to every candidate
scale, checkpoint readers to the stored fp16/fp32 scales); the groups are ``group_size``
consecutive k from k = 0, the last one shorter when ``group_size`` does not divide K; the
reference rounds the dequantized weight ``(code - z) * s`` (exact in float32) to bf16 once and
accumulates in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import contract
from .numerics import bf16_round, pack_nibbles, unpack_nibbles

GROUP_SIZES = contract.GROUP_SIZES
SCALE_DTYPE = getattr(torch, contract.W4A16_SCALE_DTYPE)  # op version 2: bfloat16 (version 1: float32)


def num_groups(k: int, group_size: int) -> int:
    """Groups per weight row: ceil(K / group_size) (a partial last group when it does not divide K)."""
    return -(-k // group_size)


def check_shape(k: int, group_size: int) -> str | None:
    """Why an [N, K] weight cannot be W4A16Proj at ``group_size``, or None."""
    if group_size not in GROUP_SIZES:
        return f"group size must be one of {GROUP_SIZES}, found {group_size}"
    if k % 2:
        return f"K={k} is odd; two 4-bit codes a byte need an even K"
    return None


def store_scale(s: torch.Tensor) -> torch.Tensor:
    """The stored form of group scales: bfloat16, rounded once (RNE) from float32, float16 or
    bfloat16 values (float16 -> float32 is exact, so this is one rounding for every source)."""
    return s.to(torch.float32).to(SCALE_DTYPE)


@dataclass(frozen=True)
class W4A16Weight:
    weight: torch.Tensor  # int8 [N, K/2]
    weight_scale: torch.Tensor  # bfloat16 [N, ceil(K/group)]
    zero_point: torch.Tensor | None  # int8 [N, ceil(K/group)] or None (symmetric, 8)
    group_size: int


def _groups(w: torch.Tensor, group_size: int) -> torch.Tensor:
    """[N, K] -> [N, G, group_size]; a partial last group is padded with copies of its last value,
    which changes no group's minimum, maximum or absolute maximum."""
    n, k = w.shape
    pad = num_groups(k, group_size) * group_size - k
    if pad:
        w = torch.cat((w, w[:, -1:].expand(n, pad)), dim=1)
    return w.reshape(n, -1, group_size)


def quantize(w: torch.Tensor, group_size: int = 128, symmetric: bool = True) -> W4A16Weight:
    """Round-to-nearest int4 quantization of a float [N, K] weight, per row and group; the codes are
    rounded against the stored (bf16) scales."""
    n, k = w.shape
    why = check_shape(k, group_size)
    if why:
        raise ValueError(why)
    g = _groups(w.to(torch.float32), group_size)
    if symmetric:
        amax = g.abs().amax(dim=-1)
        # Codes 0..15 around 8: the grid is -8..7 times the scale; +-7.5 maps to the edges.
        scale = store_scale(torch.where(amax > 0, amax / 7.5, torch.ones_like(amax))).to(torch.float32)
        q = torch.clamp(torch.round(g / scale[..., None]) + 8, 0, 15)
        zero = None
    else:
        lo, hi = g.amin(dim=-1), g.amax(dim=-1)
        scale = store_scale(torch.where(hi > lo, (hi - lo) / 15.0, torch.ones_like(hi))).to(torch.float32)
        zp = torch.clamp(torch.round(-lo / scale), 0, 15)
        q = torch.clamp(torch.round(g / scale[..., None]) + zp[..., None], 0, 15)
        zero = zp.to(torch.int8)
    codes = q.reshape(n, -1)[:, :k].to(torch.uint8)
    return W4A16Weight(pack_nibbles(codes), store_scale(scale).contiguous(), zero, group_size)


def dequantize(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
) -> torch.Tensor:
    """The contract's w[n, k] = (code - z) * s in float32 (exact; not yet rounded to bf16)."""
    codes = unpack_nibbles(weight).to(torch.float32)
    k = codes.shape[1]
    z = 8.0 if zero_point is None else zero_point.to(torch.float32).repeat_interleave(group_size, 1)[:, :k]
    s = weight_scale.to(torch.float32).repeat_interleave(group_size, 1)[:, :k]
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
    if weight_scale.dtype != SCALE_DTYPE:
        raise ValueError(f"W4A16Proj (op version 2) takes bfloat16 group scales, found {weight_scale.dtype}")
    wb = bf16_round(dequantize(weight, weight_scale, zero_point, group_size))
    acc = bf16_round(x.to(torch.float32)) @ wb.T
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
