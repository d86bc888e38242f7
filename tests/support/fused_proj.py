"""Fused projections (issue 20: q|k|v as one ``qkv_proj``, gate|up as one ``gate_up_proj``), the CPU
half shared by tests/gpu/test_fused_proj.py and tests/ops/test_fused_quant.py: the summation-order
mirror of plugins/common/projTiers.h, the weight formats, and quantizing the parts and their
concatenation (what the exporter quantizes) from one float weight.
"""

from __future__ import annotations

import torch

from metrale_export.ops import w4a4, w4a16, w8a8

FP8_BLOCK = 128
# W4A4: a part that does not hold the concatenation's amax is quantized under a larger global scale
# than its own, so with other codes; its output's quantization error (against the float weight) stays
# within this factor of the part's own quantization's (measured on the CPU, 2026-12-03, the test
# shapes: 0.98-1.02). An output bound between the two cannot be the kernels' docs/ops.md bound: the
# two outputs differ by about 9% (another rounding of every weight element), not by float32 sums.
W4A4_FUSED_ERROR_RATIO = 1.05


def proj_slices(n: int, k: int) -> int:
    """projSlices(n, k) of plugins/common/projTiers.h, line for line: how many slices the 128-k blocks
    of an [n, k] weight form (block b in slice b mod S). The kernels' summation order is a function of
    this and k alone, so two weights of one K and the same projSlices sum every column alike."""
    nkb = (k + 127) // 128
    tiles = (n + 15) // 16
    s = 2
    while s < 8 and tiles * s < 2048:
        s *= 2
    return s if s < nkb else (nkb if nkb > 0 else 1)


# Qwen3-shaped fused weights: name -> (K, the parts' row counts). Both kinds of part appear: one
# whose projSlices equals the fused weight's (the same summation order, so the same bits are
# expected) and one where they differ (tests/ops/test_fused_quant.py checks that both appear).
FUSED_SHAPES = {
    "qkv-k1024": (1024, (1024, 512, 512)),   # q 8 x 128, k and v 4 x 128: S 8 for all
    "gate_up-k1024": (1024, (3072, 3072)),   # Qwen3-0.6B's MLP: S 8 for both
    "gate_up-1.7b": (2048, (6144, 6144)),    # Qwen3-1.7B's MLP: fused S 4, parts S 8
    "qkv-8b": (4096, (4096, 1024, 1024)),    # Qwen3-8B's attention: S 8 for all
}


def same_slices(k: int, sizes) -> list[bool]:
    """Per part: whether its projSlices equals the fused weight's."""
    return [proj_slices(n, k) == proj_slices(sum(sizes), k) for n in sizes]


# name -> (op, options of tests/gpu/test_proj_kernels.py's Layer).
FORMATS = {
    "w4a16-zp": ("w4a16", dict(group_size=128, symmetric=False, bias=False)),
    "w4a16-sym": ("w4a16", dict(group_size=128, symmetric=True, bias=False)),
    "w8a8-channel-row": ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False)),
    "w8a8-block128-row": ("w8a8", dict(gran="block128", act="fp8", agran="row", bias=False)),
    "w8a8-channel-rowblock": ("w8a8", dict(gran="channel", act="fp8", agran="row_block128", bias=False)),
    "w8a8-block128-rowblock": ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False)),
    "w4a4-nvfp4": ("w4a4", dict(act="nvfp4", input_scale=False, bias=False)),
}


def float_parts(k: int, sizes, seed: int, scales=None) -> list[torch.Tensor]:
    """One random float32 [n_p, k] weight per part; ``scales`` (default 0.02, 0.05, 0.01, ...) give the
    parts different magnitudes, as q, k and v have, so that one part holds the concatenation's amax."""
    g = torch.Generator().manual_seed(seed)
    scales = scales or (0.02, 0.05, 0.01, 0.03)
    return [torch.randn(n, k, generator=g) * scales[i % len(scales)] for i, n in enumerate(sizes)]


def quantize(op: str, o: dict, w: torch.Tensor, search: bool = False) -> dict:
    """The quantized operands of ``w`` in the format (CPU tensors, the names of the op's inputs)."""
    if op == "w4a16":
        q = w4a16.quantize(w, o["group_size"], o["symmetric"], search=search)
        return dict(weight=q.weight, weight_scale=q.weight_scale, zero_point=q.zero_point)
    if op == "w8a8":
        q = w8a8.quantize(w, o["gran"])
        return dict(weight=q.weight, weight_scale=q.weight_scale)
    q = w4a4.quantize(w, search=search)
    return dict(weight=q.weight, weight_scale=q.weight_scale, weight_global_scale=q.weight_global_scale)


def _block_rows(t: torch.Tensor, r0: int, n: int, total: int) -> torch.Tensor:
    """The 128-row blocks of W8A8 block128 scales ``t`` that rows r0..r0+n cover, which must be whole
    blocks (the last part may end in a partial one)."""
    if r0 % FP8_BLOCK or (n % FP8_BLOCK and r0 + n != total):
        raise ValueError(f"block128 scales: part rows {r0}..{r0 + n} are not whole 128-row blocks")
    return t[r0 // FP8_BLOCK:(r0 + n + FP8_BLOCK - 1) // FP8_BLOCK]


def row_slices(op: str, o: dict, q: dict, sizes) -> list[dict]:
    """The operands of each part's rows of a fused quantized weight ``q`` (the parts in order).
    block128 W8A8 scales cover 128 rows each: a part boundary off a multiple of 128 is an error."""
    out, r0 = [], 0
    block_scales = op == "w8a8" and o["gran"] == "block128"
    for n in sizes:
        part = {}
        for key, t in q.items():
            if t is None or key == "weight_global_scale":
                part[key] = t
            elif block_scales and key == "weight_scale":
                part[key] = _block_rows(t, r0, n, sum(sizes))
            else:
                part[key] = t[r0:r0 + n]
        out.append(part)
        r0 += n
    return out


def mismatches(fused_part: dict, part: dict) -> list[str]:
    """The operands in which a part's rows of the fused quantization differ from the part's own."""
    bad = []
    for key, t in part.items():
        f = fused_part[key]
        if (t is None) != (f is None) or (t is not None and not torch.equal(t, f)):
            bad.append(key)
    return bad


def holds_amax(parts: list[torch.Tensor], i: int) -> bool:
    """Whether part i holds the concatenation's largest magnitude (its W4A4 global scale is then the
    fused weight's, so its codes and scales are the same)."""
    return bool(parts[i].abs().amax() == max(p.abs().amax() for p in parts))
