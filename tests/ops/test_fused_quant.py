"""Fused projections (issue 20), the CPU half: quantizing the concatenation [q; k; v] (or [gate; up])
as the exporter does gives, for the row-local formats (W4A16's groups, W8A8's channel scales and its
128-row block scales on part boundaries that are multiples of 128), exactly the parts' own codes and
scales; W4A4's per-tensor global scale is the concatenation's, so only the part holding the largest
magnitude keeps its codes, and the others' quantization error stays that of their own quantization.
The projSlices mirror (tests/support/fused_proj.py) against values worked by hand from
plugins/common/projTiers.h. The GPU half: tests/gpu/test_fused_proj.py.
"""

from __future__ import annotations

import pytest
import torch
from support import fused_proj as fp

from metrale_export.ops import w4a4, w8a8

# (n, k, projSlices): nkb = ceil(k / 128), tiles = ceil(n / 16); S doubles from 2 while S < 8 and
# tiles * S < 2048, then at most nkb (at least 1).
HAND = [
    (1024, 1024, 8),    # tiles 64: 128, 256 < 2048 -> 8; nkb 8
    (2048, 1024, 8),    # qkv of q 1024 + k 512 + v 512: tiles 128: 256, 512 -> 8
    (6144, 1024, 8),    # gate|up 2 x 3072: tiles 384: 768, 1536 -> 8
    (6144, 2048, 8),    # Qwen3-1.7B gate (or up): tiles 384 -> 8
    (12288, 2048, 4),   # its gate|up: tiles 768: 1536 < 2048 -> 4; 3072 stops
    (12288, 4096, 4),   # Qwen3-8B gate: tiles 768 -> 4
    (24576, 4096, 2),   # its gate|up: tiles 1536: 3072 >= 2048 stops at 2
    (6144, 4096, 8),    # Qwen3-8B qkv: tiles 384 -> 8
    (8200, 1024, 4),    # tiles 513: 1026 -> 4; 2052 stops (tests/gpu/test_proj_kernels.py: "4 slices")
    (16400, 640, 2),    # tiles 1025: 2050 stops at 2; nkb 5
    (200, 160, 2),      # 8 wanted, nkb 2
    (197, 96, 1),       # nkb 1
    (0, 0, 1),          # no blocks: 1
]


@pytest.mark.parametrize("n,k,s", HAND)
def test_proj_slices_mirrors_the_header(n, k, s):
    assert fp.proj_slices(n, k) == s


def test_the_gpu_shapes_have_parts_of_equal_and_of_other_slice_counts():
    flags = [f for k, sizes in fp.FUSED_SHAPES.values() for f in fp.same_slices(k, sizes)]
    assert True in flags and False in flags


ROW_LOCAL = ["w4a16-zp", "w4a16-sym", "w8a8-channel-row", "w8a8-block128-row"]
SHAPES = {"qkv": (256, (256, 128, 128)), "gate_up": (384, (384, 384))}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("fmt", ROW_LOCAL)
def test_row_local_formats_quantize_the_concatenation_as_the_parts(fmt, shape):
    op, o = fp.FORMATS[fmt]
    k, sizes = SHAPES[shape]
    parts = fp.float_parts(k, sizes, seed=len(fmt) + k)
    fused = fp.quantize(op, o, torch.cat(parts), search=True)
    for i, (rows, p) in enumerate(zip(fp.row_slices(op, o, fused, sizes), parts)):
        own = fp.quantize(op, o, p, search=True)
        assert not fp.mismatches(rows, own), f"{fmt} {shape} part {i}: {fp.mismatches(rows, own)} differ"


def test_block128_scales_need_part_boundaries_on_128_rows():
    """A part boundary inside a 128-row block shares that block's scale between two parts: the fused
    scale is not the part's own (so the split refuses it; Qwen3's q, kv and intermediate sizes are
    multiples of 128)."""
    parts = fp.float_parts(256, (200, 56), seed=3, scales=(0.01, 0.05))
    fused = w8a8.quantize(torch.cat(parts), "block128")
    assert not torch.equal(fused.weight_scale[1], w8a8.quantize(parts[0], "block128").weight_scale[1])
    op, o = fp.FORMATS["w8a8-block128-row"]
    with pytest.raises(ValueError, match="128-row blocks"):
        fp.row_slices(op, o, fp.quantize(op, o, torch.cat(parts)), (200, 56))


def _rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@pytest.mark.parametrize("search", [False, True])
def test_w4a4_fused_global_scale_keeps_the_parts_quantization_error(search):
    op, o = fp.FORMATS["w4a4-nvfp4"]
    k, sizes = SHAPES["qkv"]
    parts = fp.float_parts(k, sizes, seed=11)
    fused = fp.quantize(op, o, torch.cat(parts), search=search)
    x = torch.randn(16, k, generator=torch.Generator().manual_seed(5))
    for i, (rows, p) in enumerate(zip(fp.row_slices(op, o, fused, sizes), parts)):
        own = fp.quantize(op, o, p, search=search)
        if fp.holds_amax(parts, i):
            assert not fp.mismatches(rows, own), f"part {i} holds the amax: the same global scale, the same codes"
            continue
        assert {"weight", "weight_global_scale"} <= set(fp.mismatches(rows, own)), f"part {i}"
        ref = x.double() @ p.double().T
        y_f = w4a4.proj(x, rows["weight"], rows["weight_scale"], rows["weight_global_scale"], None, None, "nvfp4")
        y_p = w4a4.proj(x, own["weight"], own["weight_scale"], own["weight_global_scale"], None, None, "nvfp4")
        assert _rel(y_f, ref) <= fp.W4A4_FUSED_ERROR_RATIO * _rel(y_p, ref), f"part {i}"
