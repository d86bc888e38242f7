"""W4A16Proj (op version 2): int4 weights with bfloat16 group scales (optional zero points), bf16
activations.

Quantizer (from a float weight: the full int4 grid and a per-group scale search), dequantizer and the
CPU reference of the op, all following docs/ops.md. Invariants: codes are 0..15 with the zero point 8
when symmetric; group scales are signed and stored as bfloat16, rounded once from whatever precision
they were found or computed in (``store_scale``, the one place that rounding happens: the quantizer
applies it to every search candidate, so the error it minimises is the exported one; checkpoint
readers apply it to the stored fp16/fp32 scales); the groups are ``group_size`` consecutive k from
k = 0, the last one shorter when ``group_size`` does not divide K; the quantizer is a pure function of
the weight (no randomness; it runs on one thread, so no float32 sum depends on the machine's thread
count), so exports are byte-identical run to run;
the reference rounds the dequantized weight ``(code - z) * s`` (exact in float32) to bf16 once and
accumulates in float32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from .. import contract
from ..errors import Check
from . import weight_cache
from .numerics import bf16_round, pack_nibbles, unpack_nibbles

GROUP_SIZES = contract.GROUP_SIZES
SCALE_DTYPE = getattr(torch, contract.W4A16_SCALE_DTYPE)  # op version 2: bfloat16 (version 1: float32)
# Scale search. Candidates are evaluated with the scale as the op stores it (``store_scale``), so the
# chosen error is the exported one. Divisors of a group's signed largest-magnitude value m
# (scale = m / d): d = -8 puts m on code 0 exactly (value -8 * scale = m, the full [-8, 7] grid:
# the scale ONNX Runtime GenAI's int4 uses); the others shrink the step, clip m, and win only where
# that lowers the group's squared error. Measured in benchmarks/bench_quant.py (make bench-export).
SYMMETRIC_DIVISORS = (-8.0, -8.5, -9.5)
# Asymmetric groups (the export's default): the clipping range [lo, hi] (which holds 0) shrunk about
# its midpoint by these factors; 1.0 is the plain round-to-nearest range, scale (hi - lo) / 15 and
# zero point round(-lo / scale), which puts lo and hi within half a step of codes 0 and 15.
# Two candidates: a third (0.86) changed the median error by under 0.2% on bench_quant's weights for
# a third more search time (the search costs 45 CPU s of a 210 s Qwen3-8B export with three).
ASYMMETRIC_SHRINK = (1.0, 0.93)
# Rows are quantized in chunks of about this many elements: 1 MiB of float32 a temporary, so the
# search's temporaries stay in a core's L2 (1 << 22 was 2x slower on the 8B shape, one thread).
_CHUNK_ELEMENTS = 1 << 18


@contextlib.contextmanager
def one_thread():
    """torch's intra-op threads off while quantizing. The chunks are small (``_CHUNK_ELEMENTS``), so a
    second thread only adds synchronisation: on the 2-core machine under load, one 12288x4096 weight
    took 0.64 CPU s on one thread and 6-20 CPU s (13-55 s of wall time) on two. One thread also keeps
    the order of every float32 sum, and so the chosen candidates, independent of the machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def num_groups(k: int, group_size: int) -> int:
    """Groups per weight row: ceil(K / group_size) (a partial last group when it does not divide K)."""
    return -(-k // group_size)


def shape_check(k: int, group_size: int) -> Check:
    """Whether an [N, K] weight can be W4A16Proj at ``group_size``: every reason it cannot."""
    return Check.of([
        f"group size must be one of {GROUP_SIZES}, found {group_size}" if group_size not in GROUP_SIZES else None,
        f"K={k} is odd; two 4-bit codes a byte need an even K" if k % 2 else None,
    ])


def store_scale(s: torch.Tensor) -> torch.Tensor:
    """The stored form of group scales: bfloat16, rounded once (RNE) from float32, float16 or
    bfloat16 values (float16 -> float32 is exact, so this is one rounding for every source)."""
    return s.to(torch.float32).to(SCALE_DTYPE)


@dataclass(frozen=True)
class W4A16Weight:
    weight: torch.Tensor  # int8 [N, K/2]
    weight_scale: torch.Tensor  # bfloat16 [N, ceil(K/group)]; negative where a group's largest value is > 0
    zero_point: torch.Tensor | None  # int8 [N, ceil(K/group)] or None (symmetric, 8)
    group_size: int


def stored_scale(s: torch.Tensor) -> torch.Tensor:
    """A group scale as W4A16Proj stores it (``store_scale``), back in float32.

    The scale search evaluates every candidate through this, so the error it minimises is the
    exported one."""
    return store_scale(s).to(torch.float32)


def quantize(w: torch.Tensor, group_size: int = 128, symmetric: bool = True,
             search: bool = True) -> W4A16Weight:
    """int4 quantization of a float [N, K] weight, per row and group of ``group_size`` along K.

    Symmetric: codes 0..15 around 8 on the full [-8, 7] grid; the scale is signed, ``m / -8`` for the
    group's largest-magnitude value ``m``, so ``m`` lands on code 0 and dequantizes exactly (to
    ``store_scale`` precision). Asymmetric (the export's default, ``QuantRequest.symmetric``): scale
    ``(hi - lo) / 15`` and zero point ``round(-lo / scale)`` from the group's range ``[lo, hi]``
    (which holds 0), so ``lo`` lands on code 0 and ``hi`` within half a step of code 15. With ``search``, each group takes the candidate scale (or clipped range) of lowest squared
    error (``SYMMETRIC_DIVISORS``, ``ASYMMETRIC_SHRINK``); the first candidate is the plain
    round-to-nearest one and is kept unless another is strictly better. Every candidate is judged
    with its stored (bf16) scale.

    A partial last group (``group_size`` not dividing K) is padded with zeros to a whole group: a zero
    quantizes with zero error in both modes (code 8; code z with the range holding 0) and changes no
    group's largest magnitude or range, so the group's scale, zero point and codes are those of its
    real values alone, and the padding's codes are dropped.
    """
    n, k = w.shape
    check = shape_check(k, group_size)
    if not check.ok:
        raise ValueError(check.message)
    with one_thread():
        return _quantize(w, group_size, symmetric, search)


def _quantize(w: torch.Tensor, group_size: int, symmetric: bool, search: bool) -> W4A16Weight:
    n, k = w.shape
    groups = num_groups(k, group_size)
    kp = groups * group_size
    codes = torch.empty(n, kp, dtype=torch.uint8)
    scale = torch.empty(n, groups, dtype=torch.float32)
    zero = None if symmetric else torch.empty(n, groups, dtype=torch.int8)
    rows = max(1, _CHUNK_ELEMENTS // kp)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        block = w[r0:r1]
        if kp != k:
            block = torch.cat((block, block.new_zeros(r1 - r0, kp - k)), dim=1)
        # [group_size, groups of the chunk]: per-group values broadcast along the contiguous axis.
        chunk = block.reshape(-1, group_size).t()
        g = torch.empty(chunk.shape, dtype=torch.float32).copy_(chunk)
        if symmetric:
            s, q = _symmetric(g, SYMMETRIC_DIVISORS if search else SYMMETRIC_DIVISORS[:1])
        else:
            s, zp, q = _asymmetric(g, ASYMMETRIC_SHRINK if search else ASYMMETRIC_SHRINK[:1])
            zero[r0:r1] = zp.reshape(r1 - r0, groups).to(torch.int8)
        codes[r0:r1] = q.t().reshape(r1 - r0, kp)
        scale[r0:r1] = s.reshape(r1 - r0, groups)
    if kp != k:
        codes = codes[:, :k].contiguous()
    # The scales are already stored values (float32 holding bf16): this rounding is exact.
    return W4A16Weight(pack_nibbles(codes), store_scale(scale), zero, group_size)


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
        # clamp(round(g / s), -z, 15 - z) is clamp(round(g / s) + z, 0, 15) - z, in two passes fewer.
        r = torch.div(g, s).round_().clamp_(min=-zp, max=15 - zp).mul_(s).sub_(g)
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
    """The contract's w[n, k] = (code - z) * s in float32 (exact; not yet rounded to bf16)."""
    codes = unpack_nibbles(weight).to(torch.float32)
    k = codes.shape[1]
    z = 8.0 if zero_point is None else zero_point.to(torch.float32).repeat_interleave(group_size, 1)[:, :k]
    s = weight_scale.to(torch.float32).repeat_interleave(group_size, 1)[:, :k]
    return (codes - z) * s


def dequantize_bf16(
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
) -> torch.Tensor:
    """bf16((code - z) * s) [N, K] as float32: what the reference multiplies, in a few passes.

    Computed in bfloat16 on the [N, groups, group_size] view (scales broadcast, no repeat): code - z
    is an integer in [-15, 15], exact in bf16, and a bf16 product is the float32 product (exact
    here: 8 x 5 significant bits) rounded once to bf16, so this equals
    ``bf16_round(dequantize(...))`` bit for bit (tested) at a fraction of its memory traffic."""
    n = weight.shape[0]
    codes = unpack_nibbles(weight)
    k = codes.shape[1]
    groups = num_groups(k, group_size)
    if groups * group_size != k:
        codes = torch.nn.functional.pad(codes, (0, groups * group_size - k))
    w = codes.to(torch.bfloat16).view(n, groups, group_size)
    w.sub_(8.0 if zero_point is None else zero_point.to(torch.bfloat16)[..., None])
    w.mul_(weight_scale.to(torch.bfloat16)[..., None])
    w = w.view(n, groups * group_size)
    return (w if groups * group_size == k else w[:, :k]).to(torch.float32, memory_format=torch.contiguous_format)


def proj(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    bias: torch.Tensor | None,
    group_size: int,
    activation_format: str = "bf16",
) -> torch.Tensor:
    """CPU reference of W4A16Proj: y = bf16(x) @ bf16(w)^T (+ bias), in the dtype of x. Inside
    ``weight_cache.reuse()`` the expanded weight is made once for equal tensors."""
    if activation_format != "bf16":
        raise ValueError(f"W4A16Proj runs only bf16 activations, asked for {activation_format!r}")
    if weight_scale.dtype != SCALE_DTYPE:
        raise ValueError(f"W4A16Proj (op version 2) takes bfloat16 group scales, found {weight_scale.dtype}")
    wb = weight_cache.expanded("w4a16", (weight, weight_scale, zero_point), (group_size,),
                               lambda: dequantize_bf16(weight, weight_scale, zero_point, group_size))
    acc = bf16_round(x.to(torch.float32)) @ wb.T
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
