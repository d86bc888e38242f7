"""W4A4Proj: NVFP4 weights (e2m1, e4m3 per-16 scales, float32 global scale), NVFP4 or bf16 activations.

Quantizer (ModelOpt's scheme: global scale amax / (6 * 448); each block's e4m3 scale searched among
the rounded one and its two e4m3 neighbours for the lowest squared error), dequantizer, the in-op activation
quantizer and the CPU reference, following docs/ops.md. Invariants: the activation global scale is
static or per row, never per tensor; (code * e4m3 scale) is exact in bf16, so the reference's
float32 matmul of those factors is the NVFP4 product up to accumulation order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import weight_cache
from .w4a16 import one_thread
from .numerics import (
    E2M1_MAX,
    E4M3_MAX,
    NVFP4_BLOCK,
    bf16_round,
    e2m1_decode,
    e2m1_encode,
    e2m1_round,
    e4m3_from_bits,
    e4m3_round,
    e4m3_to_bits,
    pack_nibbles,
    unpack_nibbles,
)

_GLOBAL_DIV = E2M1_MAX * E4M3_MAX  # 2688


@dataclass(frozen=True)
class W4A4Weight:
    weight: torch.Tensor  # int8 [N, K/2], e2m1 codes
    weight_scale: torch.Tensor  # int8 [N, K/16], e4m3 bits
    weight_global_scale: torch.Tensor  # float32 [1]


def _block_scales(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The round-to-nearest e4m3 block scales of float32 x [R, K] with global scales g [R, 1]."""
    r, k = x.shape
    bmax = x.reshape(r, k // NVFP4_BLOCK, NVFP4_BLOCK).abs().amax(dim=-1)
    return e4m3_round(bmax / (E2M1_MAX * g))


def _block_codes(x: torch.Tensor, g: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """The e2m1 codes (uint8 [R, K]) of x [R, K] under block scales s (e4m3 [R, K/16]); a block
    whose scale is 0 gets zero codes."""
    r, k = x.shape
    blocks = x.reshape(r, k // NVFP4_BLOCK, NVFP4_BLOCK)
    eff = s.to(torch.float32) * g
    safe = torch.where(eff == 0, torch.ones_like(eff), eff)
    codes = e2m1_encode(blocks / safe[..., None])
    codes = torch.where((eff == 0)[..., None], torch.zeros_like(codes), codes)
    return codes.reshape(r, k)


def _block_quantize(x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NVFP4 of float32 x [R, K] with global scales g [R, 1]: (codes uint8 [R, K], scale e4m3 [R, K/16])."""
    s = _block_scales(x, g)
    return _block_codes(x, g, s), s


# Rows are quantized in chunks of about this many elements (the search's temporaries stay in a
# core's cache, as W4A16's quantizer does); each block's result does not depend on the chunk.
_CHUNK_ELEMENTS = 1 << 18


def quantize(w: torch.Tensor, search: bool = True) -> W4A4Weight:
    """NVFP4 quantization of a float [N, K] weight (K a multiple of 16).

    With ``search``, each block's e4m3 scale is the one of lowest squared error among the rounded
    ``bmax / (6 * gw)`` (the round-to-nearest scale, kept on a tie) and its two e4m3 neighbours."""
    w = w.to(torch.float32)
    n, k = w.shape
    if k % NVFP4_BLOCK:
        raise ValueError(f"NVFP4 needs K to be a multiple of {NVFP4_BLOCK}, found K={k}")
    amax = w.abs().amax()
    gw = (amax / _GLOBAL_DIV) if amax > 0 else torch.tensor(1.0)
    gw = gw.reshape(1).to(torch.float32)
    codes = torch.empty(n, k // 2, dtype=torch.int8)
    scales = torch.empty(n, k // NVFP4_BLOCK, dtype=torch.int8)
    rows = max(1, _CHUNK_ELEMENTS // max(k, 1))
    with one_thread():
        for r0 in range(0, n, rows):
            x = w[r0:r0 + rows]
            g = gw.reshape(1, 1).expand(x.shape[0], 1)
            s = _block_scales(x, g)
            if search:
                s = _search_block_scales(x, g, s)
            codes[r0:r0 + rows] = pack_nibbles(_block_codes(x, g, s))
            scales[r0:r0 + rows] = e4m3_to_bits(s)
    return W4A4Weight(codes, scales, gw)


def _search_block_scales(x, g, s):
    """Per block, the e4m3 scale among s and its neighbours (by bit pattern) of lowest squared error.
    A candidate's error is that of its rounded values (``e2m1_round``, the decoded codes bit for
    bit), so no candidate's codes are made: the codes of the chosen scale are made once after."""
    r, k = x.shape
    blocks = x.reshape(r, k // NVFP4_BLOCK, NVFP4_BLOCK)

    def err(sc):
        eff = sc.to(torch.float32) * g
        safe = torch.where(eff == 0, torch.ones_like(eff), eff)
        v = torch.where((eff == 0)[..., None], 0.0, e2m1_round(blocks / safe[..., None])) * eff[..., None]
        return (v - blocks).square_().sum(dim=-1)

    bits = e4m3_to_bits(s).to(torch.int16)
    best_e, best_s = err(s), s
    for step in (-1, 1):
        cand = e4m3_from_bits(torch.clamp(bits + step, 0, 0x7E).to(torch.int8)).to(torch.float8_e4m3fn)
        e = err(cand)
        better = e < best_e
        best_e = torch.where(better, e, best_e)
        best_s = torch.where(better, cand, best_s)
    return best_s


def dequantize_factors(weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """e2m1(code) * e4m3(scale) per element, float32 [N, K] (exact; the global scale not applied)."""
    vals = e2m1_decode(unpack_nibbles(weight))
    s = e4m3_from_bits(weight_scale).repeat_interleave(NVFP4_BLOCK, 1)
    return vals * s


def dequantize(weight, weight_scale, weight_global_scale) -> torch.Tensor:
    """The contract's w[n, k] in float32."""
    return dequantize_factors(weight, weight_scale) * weight_global_scale.to(torch.float32)


def quantize_activation(
    x: torch.Tensor, input_scale: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic NVFP4 quantization of bf16(x): (factors (e2m1 * e4m3) float32 [M, K], ga [M, 1])."""
    x = bf16_round(x.to(torch.float32))
    m, k = x.shape
    if input_scale is not None:
        ga = input_scale.to(torch.float32).reshape(1, 1).expand(m, 1)
    else:
        amax = x.abs().amax(dim=1, keepdim=True) if k else torch.zeros(m, 1)
        ga = torch.where(amax > 0, amax / _GLOBAL_DIV, torch.ones_like(amax))
    codes, s = _block_quantize(x, ga)
    factors = e2m1_decode(codes) * s.to(torch.float32).repeat_interleave(NVFP4_BLOCK, 1)
    return factors, ga


def proj(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    weight_global_scale: torch.Tensor,
    input_scale: torch.Tensor | None,
    bias: torch.Tensor | None,
    activation_format: str = "nvfp4",
) -> torch.Tensor:
    """CPU reference of W4A4Proj in the dtype of x."""
    gw = weight_global_scale.to(torch.float32).reshape(())
    if activation_format == "bf16":
        wb = weight_cache.expanded("w4a4-bf16", (weight, weight_scale, weight_global_scale), (),
                                   lambda: bf16_round(dequantize_factors(weight, weight_scale) * gw))
        acc = bf16_round(x.to(torch.float32)) @ wb.T
    elif activation_format == "nvfp4":
        a, ga = quantize_activation(x, input_scale)
        factors = weight_cache.expanded("w4a4-factors", (weight, weight_scale), (),
                                        lambda: dequantize_factors(weight, weight_scale))
        acc = (a @ factors.T) * (ga * gw)
    else:
        raise ValueError(f"W4A4Proj runs bf16 or nvfp4 activations, asked for {activation_format!r}")
    if bias is not None:
        acc = acc + bias.to(torch.float32)
    return acc.to(x.dtype)
