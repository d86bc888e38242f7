"""GPU tests of the activation pre-passes' row split (plugins/common/actQuant.cuh, actRowChunks).

At few rows each pre-pass (quantNvfp4Kernel, quantFp8Kernel, wgFp8QuantKernel,
wgFp8QuantBlockKernel and the grouped-expert kernels on the same row functions, PDL forms included)
splits a row over gridDim.y CTAs; the split is a speed choice, so its bits must be the one-CTA-a-row
grid's (METRALE_ACT_CHUNKS=1, the grid before the split). For M in {1, 2, 8, 16, 300} and
K in {4096, 12288}, x in float32 / bfloat16 / float16:
- dense W4A4 (nvfp4, dynamic and static global scale) and W8A8 (fp8 row, row_block128 and the
  static tensor scale; the default FP8 wgmma launch with its fused pre-pass, and the exact path
  with quantFp8Kernel): the whole workspace (pre-filled with one byte pattern: the operand, its
  scales, the zero fill of the padding rows, and what the GEMM writes after them) and the output
  are bitwise the same under the default split, an uneven forced split (5 chunks) and more chunks
  than the row has blocks (1000: empty trailing chunks), as under METRALE_ACT_CHUNKS=1;
- the pre-pass outputs that sit at the workspace's start (nvfp4's f16 factors and ga; the exact
  fp8 path's f16 xq and sx) are the CPU reference's (w4a4 / w8a8.quantize_activation): the same
  values (a zero's sign aside), the scales bitwise;
- grouped-expert W4A4 / W8A8 (slot path at small M, sorted path at M = 300), with and without the
  PDL launch sequence (METRALE_MOE_DECODE=base, pdl and the default): the outputs bitwise the same
  at every split.
Skipped, with the reason, without a CUDA GPU.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_proj_kernels import DEV, Layer, _inputs  # noqa: E402

from metrale_export.ops import cuda as mcuda  # noqa: E402,F401  (registers the CUDA kernels)
from metrale_export.ops import w4a4, w8a8  # noqa: E402
from metrale_export.ops.cuda import moe as cuda_moe  # noqa: E402
from metrale_export.ops.cuda import projections  # noqa: E402

CHUNKS_ENV = "METRALE_ACT_CHUNKS"
MMA_ENV = "METRALE_W8A8_MMA"
M_VALUES = (1, 2, 8, 16, 300)
K_VALUES = (4096, 12288)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SPLITS = (None, "5", "1000")  # the default policy, an uneven split, empty trailing chunks
N = 136
WS_ALIGN = 256  # kWS_ALIGN (plugins/common/projLaunch.cuh)
FILL = 0xA5

# (op, options, METRALE_W8A8_MMA): the default launch and the exact path (quantFp8Kernel).
DENSE = [
    ("w4a4", dict(act="nvfp4", input_scale=False, bias=False), None),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=False), None),
    ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False), None),
    ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False), "exact"),
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False), None),
    ("w8a8", dict(gran="channel", act="fp8", agran="row_block128", bias=False), None),
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False), "exact"),
    ("w8a8", dict(gran="channel", act="fp8", agran="tensor", bias=False), None),
]


def _dense_id(c):
    op, o, mma = c
    return f"{op}-{o.get('agran', o['act'])}-{o.get('gran', 'nvfp4')}" + ("-static" if o.get("input_scale") else "") \
        + (f"-{mma}" if mma else "")


class Workspaces:
    """Replaces a launcher module's workspace allocation: every workspace filled with FILL (so the
    bytes nobody writes compare equal too), the last one kept."""

    def __init__(self, monkeypatch, module):
        self.last = None

        def make(nbytes, device):
            self.last = torch.full((max(int(nbytes), 1),), FILL, dtype=torch.uint8, device=device)
            return self.last

        monkeypatch.setattr(module, "_workspace", make)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _set_split(monkeypatch, split):
    if split is None:
        monkeypatch.delenv(CHUNKS_ENV, raising=False)
    else:
        monkeypatch.setenv(CHUNKS_ENV, split)


def _dense_layer(case, k, monkeypatch, seed):
    """The case's layer (its METRALE_W8A8_MMA set) and the workspaces its launches record."""
    op, o, mma = case
    if mma is None:
        monkeypatch.delenv(MMA_ENV, raising=False)
    else:
        monkeypatch.setenv(MMA_ENV, mma)
    ws = Workspaces(monkeypatch, projections)
    return Layer(op, o, N, k, seed=seed), ws


def _run_dense(layer, x, ws, monkeypatch, split):
    _set_split(monkeypatch, split)
    y = layer.run(x)
    return y, ws.last.clone()


@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize("case", DENSE, ids=[_dense_id(c) for c in DENSE])
def test_dense_prepass_split_is_bitwise_the_row_grid(case, k, monkeypatch):
    layer, ws = _dense_layer(case, k, monkeypatch, seed=k + len(_dense_id(case)))
    fails = []
    for i, m in enumerate(M_VALUES):
        dtype = DTYPES[i % 3]
        x = _inputs(m, k, dtype, seed=7 * m + k)
        layer.set_input_scale(x)
        xd = x.to(DEV)
        y1, w1 = _run_dense(layer, xd, ws, monkeypatch, "1")
        assert torch.isfinite(y1.float()).all(), f"m={m}: non-finite output under the one-CTA-a-row grid"
        for split in SPLITS:
            y, w = _run_dense(layer, xd, ws, monkeypatch, split)
            if not torch.equal(w, w1):
                bad = (w != w1).nonzero()
                fails.append(f"m={m} {dtype} split={split}: workspace differs at {bad.numel()} bytes, "
                             f"first {bad[0].item()}")
            if not torch.equal(_bits(y), _bits(y1)):
                fails.append(f"m={m} {dtype} split={split}: output differs from the one-CTA-a-row grid")
    assert not fails, f"{_dense_id(case)} k={k}:\n" + "\n".join(fails)


# The pre-passes whose outputs start the workspace as f16 [M, K] then float32 scales at
# alignUp(2 M K, 256): quantNvfp4Kernel and the exact path's quantFp8Kernel.
CPU_CASES = [DENSE[0], DENSE[1], DENSE[3], DENSE[6]]


@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize("case", CPU_CASES, ids=[_dense_id(c) for c in CPU_CASES])
def test_prepass_outputs_are_the_cpu_reference_bitwise(case, k, monkeypatch):
    op, o, _ = case
    monkeypatch.delenv(CHUNKS_ENV, raising=False)  # the default split
    layer, ws = _dense_layer(case, k, monkeypatch, seed=3 + k)
    fails = []
    for i, m in enumerate(M_VALUES):
        dtype = DTYPES[i % 3]
        x = _inputs(m, k, dtype, seed=11 * m + k)
        layer.set_input_scale(x)
        layer.run(x.to(DEV))
        w = ws.last.cpu()
        nops = m * k * 2
        xq_gpu = w[:nops].view(torch.float16).reshape(m, k)
        off = (nops + WS_ALIGN - 1) // WS_ALIGN * WS_ALIGN
        if op == "w4a4":
            a, s = w4a4.quantize_activation(x, layer.input_scale)
            ncols = 1
        else:
            a, s = w8a8.quantize_activation(x, o["agran"], layer.input_scale)
            ncols = s.shape[1]
        s_gpu = w[off:off + 4 * m * ncols].view(torch.float32).reshape(m, ncols)
        # Equal values (the sign of a zero aside: the reference need not carry it); the scales bitwise.
        if not torch.equal(xq_gpu.float(), a.to(torch.float16).float()):
            n_bad = int((xq_gpu.float() != a).sum())
            fails.append(f"m={m} {dtype}: {n_bad} operand values differ from the CPU reference")
        if not torch.equal(s_gpu.view(torch.int32), s.to(torch.float32).contiguous().view(torch.int32)):
            fails.append(f"m={m} {dtype}: scales differ from the CPU reference")
    assert not fails, f"{_dense_id(case)} k={k}:\n" + "\n".join(fails)


MOE_E, MOE_TOP_K = 8, 3
MOE = [
    ("w4a4", dict(act="nvfp4", input_scale=False, bias=False)),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=False)),  # a static input_scale per expert
    ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False)),
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False)),
]


def _moe_id(c):
    op, o = c
    return f"{op}-{o.get('agran', o['act'])}" + ("-static" if o.get("input_scale") else "")


def _moe_run(op, o, t, x, ids, w, k):
    comb = int(w is not None)
    if op == "w8a8":
        return torch.ops.metrale.w8a8_moe_proj(x, ids, w, t["weight"], t["weight_scale"], None, None, N, k, MOE_E,
                                               MOE_TOP_K, comb, o["gran"], o["act"], o["agran"], "moe", "t")
    return torch.ops.metrale.w4a4_moe_proj(x, ids, w, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                           t["input_scale"], None, N, k, MOE_E, MOE_TOP_K, comb, o["act"], "moe", "t")


@pytest.mark.parametrize("decode", [None, "base", "pdl"])
@pytest.mark.parametrize("k", K_VALUES)
@pytest.mark.parametrize("case", MOE, ids=[_moe_id(c) for c in MOE])
def test_moe_prepass_split_is_bitwise_the_row_grid(case, k, decode, monkeypatch):
    op, o = case
    if decode is None:
        monkeypatch.delenv("METRALE_MOE_DECODE", raising=False)
    else:
        monkeypatch.setenv("METRALE_MOE_DECODE", decode)
    Workspaces(monkeypatch, cuda_moe)  # filled workspaces: no byte of an earlier launch is read
    layers = [Layer(op, o, N, k, seed=k + 101 * e) for e in range(MOE_E)]
    t = {}
    for key in layers[0].gpu:
        vals = [layer.gpu[key] for layer in layers]
        t[key] = torch.cat([v.reshape(-1) for v in vals]) if key == "weight_global_scale" else torch.stack(vals)
    t["input_scale"] = None
    if o.get("input_scale"):
        t["input_scale"] = torch.tensor([(2.0 + 0.75 * e) / 2688.0 for e in range(MOE_E)], dtype=torch.float32,
                                        device=DEV)
    fails = []
    for i, m in enumerate(M_VALUES):
        dtype = (torch.float32, torch.bfloat16)[i % 2]
        g = torch.Generator().manual_seed(m + k)
        ids = torch.stack([torch.randperm(MOE_E, generator=g)[:MOE_TOP_K] for _ in range(m)]).to(torch.int32).to(DEV)
        tw = (torch.rand(m, MOE_TOP_K, generator=g) + 0.1).to(dtype).to(DEV)
        x = _inputs(m, k, dtype, seed=m + 5).to(DEV)
        xs = _inputs(m * MOE_TOP_K, k, dtype, seed=m + 6).to(DEV).reshape(m, MOE_TOP_K, k)
        outs = {}
        for split in ("1",) + SPLITS:
            _set_split(monkeypatch, split)
            y0 = _moe_run(op, o, t, x, ids, None, k)     # combine=0: one operand row per token
            y1 = _moe_run(op, o, t, xs, ids, tw, k)      # combine=1: one per slot
            torch.cuda.synchronize()
            outs[split] = (y0, y1)
        r0, r1 = outs["1"]
        assert torch.isfinite(r0.float()).all() and torch.isfinite(r1.float()).all(), f"m={m}: non-finite output"
        for split in SPLITS:
            y0, y1 = outs[split]
            if not (torch.equal(_bits(y0), _bits(r0)) and torch.equal(_bits(y1), _bits(r1))):
                fails.append(f"m={m} {dtype} split={split}: output differs from the one-CTA-a-row grid")
    assert not fails, f"{_moe_id(case)} k={k} decode={decode}:\n" + "\n".join(fails)
