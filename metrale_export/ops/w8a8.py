"""W8A8Proj: FP8 e4m3 weights (per-channel or 128x128 block scales), FP8 or bf16 activations.

Quantizer, dequantizer, the in-op activation quantizer and the CPU reference of the op, following
docs/ops.md. Invariants: activation scales are per row, per (row, 128-block), or one static scale
(``tensor``: calibrated at export, an input of the op, never computed from the batch), so a row's
result depends on that row alone; with the static scale, x / sx saturates to +-448.

The fp8 reference (also the ONNX Runtime op's, ops/ort.py) computes the e4m3 x e4m3 products exactly
and sums them in float32. W8A8Proj version 3's GPU kernel sums them within each 128-k block in the
FP8 tensor core's accumulator (contract.W8A8_FP8_ARITHMETIC), which no CPU reproduces bit for bit:
the two agree within ops/tolerances.OP_FP32["fp8"] (norm-wise) and OP_FP8_ELEMENT (per element of
its sum of |terms|), docs/ops.md's fp8 bound. The operands (xq, sx, the codes and scales) are the
same bits on both.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..contract import STATIC_ACTIVATION_SCALE, W8A8, ceil_div
from . import weight_cache
from .numerics import E4M3_MAX, FP8_BLOCK, bf16_round, e4m3_from_bits, e4m3_round, e4m3_to_bits

STATIC = STATIC_ACTIVATION_SCALE  # the static per-tensor scale (calibrated)
WEIGHT_SCALE_GRANULARITIES = W8A8.attribute("weight_scale_granularity").values
# The dynamic granularities, computed from the row (STATIC is the static one).
ACT_SCALE_GRANULARITIES = tuple(g for g in W8A8.attribute("activation_scale_granularity").values if g != STATIC)


@dataclass(frozen=True)
class W8A8Weight:
    weight: torch.Tensor  # int8 [N, K], e4m3 bits
    weight_scale: torch.Tensor  # float32 [N] or [ceil(N/128), ceil(K/128)]
    granularity: str


def quantize(w: torch.Tensor, granularity: str = "channel") -> W8A8Weight:
    """Round-to-nearest FP8 quantization of a float [N, K] weight."""
    if granularity not in WEIGHT_SCALE_GRANULARITIES:
        raise ValueError(
            f"weight scale granularity must be one of {WEIGHT_SCALE_GRANULARITIES}, "
            f"found {granularity!r}"
        )
    w = w.to(torch.float32)
    n, k = w.shape
    if granularity == "channel":
        amax = w.abs().amax(dim=1)
        scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        q = e4m3_round(w / scale[:, None])
    else:
        nb, kb = ceil_div(n, FP8_BLOCK), ceil_div(k, FP8_BLOCK)
        padded = torch.zeros(nb * FP8_BLOCK, kb * FP8_BLOCK)
        padded[:n, :k] = w
        blocks = padded.reshape(nb, FP8_BLOCK, kb, FP8_BLOCK)
        amax = blocks.abs().amax(dim=(1, 3))
        scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        full = scale.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:n, :k]
        q = e4m3_round(w / full)
    return W8A8Weight(e4m3_to_bits(q).contiguous(), scale.contiguous(), granularity)


def expand_weight_scale(weight_scale: torch.Tensor, granularity: str, n: int, k: int) -> torch.Tensor:
    """The weight scale of every element, float32 [N, K]."""
    s = weight_scale.to(torch.float32)
    if granularity == "channel":
        return s[:, None].expand(n, k)
    return s.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:n, :k]


def dequantize(weight: torch.Tensor, weight_scale: torch.Tensor, granularity: str) -> torch.Tensor:
    """The contract's w[n, k] = fp8(code) * s in float32."""
    n, k = weight.shape
    return e4m3_from_bits(weight) * expand_weight_scale(weight_scale, granularity, n, k)


def static_scale(amax: float) -> float:
    """The static FP8 activation scale of a calibrated input amax: amax / 448 in float32, 1 where
    amax is 0 (the dynamic row scale's rule, over the calibration data)."""
    a = torch.tensor(float(amax), dtype=torch.float32)
    return float(torch.where(a > 0, a / E4M3_MAX, torch.ones_like(a)))


def quantize_activation(x: torch.Tensor, granularity: str,
                        input_scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 activation quantization of bf16(x): (xq float32 values [M, K], sx [M, nblocks]).

    For ``row`` granularity sx has one column; for ``row_block128`` one per 128 columns of K; for
    ``tensor`` it is ``input_scale`` on every row (x / sx saturating to +-448).
    """
    if granularity == STATIC:
        if input_scale is None or input_scale.numel() != 1:
            raise ValueError("activation scale granularity 'tensor' needs input_scale, one float32 value")
        x = bf16_round(x.to(torch.float32))
        sx = input_scale.to(torch.float32).reshape(1, 1).expand(x.shape[0], 1)
        return e4m3_round(x / sx).to(torch.float32), sx
    if granularity not in ACT_SCALE_GRANULARITIES:
        raise ValueError(
            f"activation scale granularity must be one of {ACT_SCALE_GRANULARITIES}, "
            f"found {granularity!r}"
        )
    x = bf16_round(x.to(torch.float32))
    m, k = x.shape
    if granularity == "row":
        amax = x.abs().amax(dim=1, keepdim=True) if k else torch.zeros(m, 1)
        sx = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
        xq = e4m3_round(x / sx).to(torch.float32)
        return xq, sx
    kb = ceil_div(k, FP8_BLOCK)
    padded = torch.zeros(m, kb * FP8_BLOCK, dtype=torch.float32, device=x.device)
    padded[:, :k] = x
    amax = padded.reshape(m, kb, FP8_BLOCK).abs().amax(dim=2)
    sx = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    full = sx.repeat_interleave(FP8_BLOCK, 1)[:, :k]
    xq = e4m3_round(x / full).to(torch.float32)
    return xq, sx


def proj(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    weight_scale_granularity: str,
    activation_format: str = "fp8",
    activation_scale_granularity: str = "row",
    input_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """CPU reference of W8A8Proj in the dtype of x (``input_scale``: the static scale of
    activation_scale_granularity ``tensor``)."""
    n, k = weight.shape
    if activation_format == "bf16":
        wb = weight_cache.expanded("w8a8-bf16", (weight, weight_scale), (weight_scale_granularity,),
                                   lambda: bf16_round(dequantize(weight, weight_scale, weight_scale_granularity)))
        acc = bf16_round(x.to(torch.float32)) @ wb.T
    elif activation_format == "fp8":
        xq, sx = quantize_activation(x, activation_scale_granularity, input_scale)
        wq = weight_cache.expanded("w8a8-fp8", (weight,), (), lambda: e4m3_from_bits(weight))
        one_scale = activation_scale_granularity in ("row", STATIC)  # one sx per row
        if weight_scale_granularity == "channel" and one_scale:
            acc = (xq @ wq.T) * sx * weight_scale.to(torch.float32)[None, :]
        else:
            acc = torch.zeros(x.shape[0], n, dtype=torch.float32, device=x.device)
            for b in range(ceil_div(k, FP8_BLOCK)):
                ks = slice(b * FP8_BLOCK, min(k, (b + 1) * FP8_BLOCK))
                partial = xq[:, ks] @ wq[:, ks].T
                sxb = sx[:, :1] if one_scale else sx[:, b : b + 1]
                if weight_scale_granularity == "channel":
                    swb = weight_scale.to(torch.float32)
                else:
                    swb = weight_scale.to(torch.float32)[:, b].repeat_interleave(FP8_BLOCK)[:n]
                acc = acc + (partial * sxb) * swb[None, :]
    else:
        raise ValueError(f"W8A8Proj runs bf16 or fp8 activations, asked for {activation_format!r}")
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
