"""W4A16Proj: int4 weights with float32 group scales (optional zero points), bf16 activations.

Quantizer (from a float weight: the full int4 grid and a per-group scale search), dequantizer and the
CPU reference of the op, all following docs/ops.md. Invariants: codes are 0..15 with the zero point 8
when symmetric; every candidate scale is judged as stored (``stored_scale``); the quantizer is a
pure function of the weight (no randomness, no data-dependent thread split), so exports are
byte-identical run to run; the reference rounds the dequantized weight to bf16 once and accumulates
in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import contract
from .numerics import bf16_round, pack_nibbles, unpack_nibbles

GROUP_SIZES = contract.GROUP_SIZES
# The stored dtype of weight_scale, from the contract (docs/ops.md): the search judges candidates in it.
SCALE_DTYPE = getattr(torch, contract.W4A16.input("weight_scale").dtype)
# Scale search. Candidates are evaluated with the scale as the op stores it (``stored_scale``), so the
# chosen error is the exported one. Divisors of a group's signed largest-magnitude value m
# (scale = m / d): d = -8 puts m on code 0 exactly (value -8 * scale = m, the full [-8, 7] grid:
# the scale ONNX Runtime GenAI's int4 uses); the others shrink the step, clip m, and win only where
# that lowers the group's squared error. Measured in benchmarks/bench_quant.py (make bench-export).
SYMMETRIC_DIVISORS = (-8.0, -8.5, -9.5)
# Asymmetric groups: the clipping range [lo, hi] shrunk about its midpoint by these factors.
ASYMMETRIC_SHRINK = (1.0, 0.93, 0.86)
# Rows are quantized in chunks of about this many elements (the search's temporaries stay in cache).
_CHUNK_ELEMENTS = 1 << 22


@dataclass(frozen=True)
class W4A16Weight:
    weight: torch.Tensor  # int8 [N, K/2]
    weight_scale: torch.Tensor  # SCALE_DTYPE [N, K/group]; negative where a group's largest value is > 0
    zero_point: torch.Tensor | None  # int8 [N, K/group] or None (symmetric, 8)
    group_size: int


def stored_scale(s: torch.Tensor) -> torch.Tensor:
    """A group scale as W4A16Proj stores it (docs/ops.md, ``weight_scale``), back in float32.

    The scale search evaluates every candidate through this, so the error it minimises is the
    exported one."""
    return s.to(SCALE_DTYPE).to(torch.float32)


def quantize(w: torch.Tensor, group_size: int = 128, symmetric: bool = True,
             search: bool = True) -> W4A16Weight:
    """int4 quantization of a float [N, K] weight, per row and group of ``group_size`` along K.

    Symmetric: codes 0..15 around 8 on the full [-8, 7] grid; the scale is signed, ``m / -8`` for the
    group's largest-magnitude value ``m``, so ``m`` lands on code 0 and dequantizes exactly (for a
    bf16 checkpoint; for float32, to ``stored_scale`` precision). Asymmetric: scale and zero point
    from the group's range. With ``search``, each group takes the candidate scale (or clipped range)
    of lowest squared error (``SYMMETRIC_DIVISORS``, ``ASYMMETRIC_SHRINK``); the first candidate is
    the plain round-to-nearest one and is kept unless another is strictly better.
    """
    n, k = w.shape
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group size must be one of {GROUP_SIZES}, found {group_size}")
    if k % group_size:
        raise ValueError(f"group size {group_size} does not divide K={k}")
    groups = k // group_size
    codes = torch.empty(n, k, dtype=torch.uint8)
    scale = torch.empty(n, groups, dtype=torch.float32)
    zero = None if symmetric else torch.empty(n, groups, dtype=torch.int8)
    rows = max(1, _CHUNK_ELEMENTS // k)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        # [group_size, groups of the chunk]: per-group values broadcast along the contiguous axis.
        chunk = w[r0:r1].reshape(-1, group_size).t()
        g = torch.empty(chunk.shape, dtype=torch.float32).copy_(chunk)
        if symmetric:
            s, q = _symmetric(g, SYMMETRIC_DIVISORS if search else SYMMETRIC_DIVISORS[:1])
        else:
            s, zp, q = _asymmetric(g, ASYMMETRIC_SHRINK if search else ASYMMETRIC_SHRINK[:1])
            zero[r0:r1] = zp.reshape(r1 - r0, groups).to(torch.int8)
        codes[r0:r1] = q.t().reshape(r1 - r0, k)
        scale[r0:r1] = s.reshape(r1 - r0, groups)
    return W4A16Weight(pack_nibbles(codes), scale.to(SCALE_DTYPE), zero, group_size)


def _pick(best: tuple | None, err: torch.Tensor, *values: torch.Tensor) -> tuple:
    """Keep, per group, the values of the lower error (the earlier candidate on a tie)."""
    if best is None:
        return (err, *values)
    better = err < best[0]
    return (torch.where(better, err, best[0]),
            *(torch.where(better, v, b) for v, b in zip(values, best[1:])))


def _symmetric(g: torch.Tensor, divisors: tuple[float, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Scales [G] and codes uint8 [group, G] of float32 groups g [group, G] (one group a column)."""
    hi, lo = g.amax(dim=0), g.amin(dim=0)
    m = torch.where(-lo > hi, lo, hi)  # the signed largest-magnitude value
    one = torch.ones_like(m)
    best = None
    for d in divisors:
        s = stored_scale(m / d)
        s = torch.where(s == 0, one, s)  # an all-zero group: any scale, codes 8
        if len(divisors) == 1:
            best = (None, s)
            break
        r = torch.div(g, s).round_().clamp_(-8, 7).mul_(s).sub_(g)
        best = _pick(best, r.square_().sum(dim=0), s)
    s = best[1]
    q = torch.div(g, s).round_().clamp_(-8, 7).add_(8)
    return s, q.to(torch.uint8)


def _asymmetric(g: torch.Tensor, shrink: tuple[float, ...]):
    """Scales [G], zero points [G] (0..15) and codes uint8 [group, G] of float32 groups [group, G]."""
    # The range holds 0: zero points are codes 0..15, so a range off zero would be clipped.
    hi, lo = g.amax(dim=0).clamp_(min=0), g.amin(dim=0).clamp_(max=0)
    mid, half = (hi + lo) * 0.5, (hi - lo) * 0.5
    best = None
    for f in shrink:
        if f == 1.0:
            a, b = lo, hi
        else:
            a, b = mid - half * f, mid + half * f
        s = stored_scale((b - a) / 15.0)
        s = torch.where(s > 0, s, torch.ones_like(s))  # an all-zero group: any scale, codes = zero
        zp = torch.clamp(torch.round(-a / s), 0, 15)
        if len(shrink) == 1:
            best = (None, s, zp)
            break
        r = torch.div(g, s).round_().add_(zp).clamp_(0, 15).sub_(zp).mul_(s).sub_(g)
        best = _pick(best, r.square_().sum(dim=0), s, zp)
    _, s, zp = best
    q = torch.div(g, s).round_().add_(zp).clamp_(0, 15)
    return s, zp, q.to(torch.uint8)


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
