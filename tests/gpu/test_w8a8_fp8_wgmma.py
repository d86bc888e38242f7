"""GPU tests of W8A8Proj version 3's default kernel, FP8 wgmma (plugins/common/projWgmmaFp8.cuh).

fp8 activations multiply on `wgmma m64nNk32 e4m3`, promoted to float32 once per 128-k block, at
every M (docs/ops.md, fp8 activation format): with per-row (or the static tensor) activation scales
and per-channel weight scales the scales come once in the epilogue; the block-scaled variants
(block128 weights and/or row_block128 activations) scale each block at its promotion,
acc + (P_b * sx[m, b]) * sw[n, b]. Its bits are its own (not the exact f16 products of the retired
versions and of the exact path), so it is checked against itself and against the stated bound:
- bitwise row invariance: every tested row of an M-row launch (the first 64 and the last 8 of the
  batch) equals the 1-row launch of that row, for M = 2 .. 4096 across every token tile (8, 16, 32,
  64, 128), on narrow and wide weights, K with a partial last block and K = 12288;
- run to run: the same launch twice gives the same bits;
- error against the float64 sum of the exact e4m3 products (times sx * sw, plus bias): norm-wise
  relative error at most tolerances.OP_FP8_TENSOR_CORE, and no element off by more than
  tolerances.OP_FP8_ELEMENT of its sum of |terms| (a wrong fragment layout gives errors of order 1);
- the FP8 kernel really runs by default: its bits differ from the exact path's, which the launcher
  keeps behind METRALE_W8A8_MMA=exact for benchmarks (and runs on a device without sm_90a code).
- the variants of the launch (METRALE_W8A8_MMA = wg-base, wg-q, wg-qe, wg-plain, wg-onetile, wg-persist: the
  pre-pass fused with the operand layout or not, the epilogue's scales hoisted or not, a CTA a tile or the
  default's persistent CTAs, the token tile 128 once it fills the SMs or the default's from the SMs' rounds)
  give bitwise the same output at every
  M tested, for float32, float16 and bfloat16 x, each the same as the default's (they change the
  data movement only);
Skipped, with the reason, without a CUDA GPU or on a GPU that is not sm_90 (the kernel is sm_90a
machine code only; elsewhere the launcher runs the exact path).
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)
if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("the FP8 wgmma variant needs an sm_90 GPU (H100/H200)", allow_module_level=True)

from metrale_export.ops import cuda as mcuda  # noqa: E402
from metrale_export.ops import tolerances, w8a8  # noqa: E402
from metrale_export.ops.numerics import FP8_BLOCK, bf16_round  # noqa: E402
from support.fp8_reference import fp8_float64  # noqa: E402

DEV = torch.device("cuda")
ENV = "METRALE_W8A8_MMA"
# Token tiles 8 / 16 / 32 / 64 / 128 and their edges (wgFp8TokenTile), a large batch.
M_VALUES = (2, 3, 7, 8, 9, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 256, 1000, 4096)
HEAD_ROWS = 64
TAIL_ROWS = 8
# docs/ops.md's bounds of the fp8 activation format (ops/tolerances.py): norm-wise, and per element
# against its sum of |terms|.
FP8_BOUND = tolerances.OP_FP8_TENSOR_CORE
ELEMENT_BOUND = tolerances.OP_FP8_ELEMENT

# (M, dtype of x and y) of the run-to-run and error checks.
RUN_CASES = ((1, torch.float32), (33, torch.bfloat16), (1000, torch.float32), (4096, torch.float16))

# (N, K, activation scale granularity, bias, weight scale granularity)
CASES = [
    (200, 1040, "row", True, "channel"),       # odd N, a partial last block (16 k)
    (197, 272, "tensor", False, "channel"),    # the static scale
    (4096, 12288, "row", False, "channel"),    # K = 12288 (8B-down), token tile 128 at large M
    (16400, 1040, "tensor", True, "channel"),  # wide weights, 129 weight tiles
    # The block-scaled variants (the official FP8 Qwen3 checkpoints' block128 x row_block128, and
    # each alone): odd N past a 128-row block, a partial last block, the static scale with block
    # weights, K = 12288, wide weights.
    (300, 400, "row_block128", True, "block128"),
    (197, 272, "row", False, "block128"),
    (136, 1040, "row_block128", False, "channel"),
    (300, 400, "tensor", False, "block128"),
    (4096, 12288, "row_block128", False, "block128"),
    (16400, 1040, "row_block128", True, "block128"),
]


def _case_id(c):
    n, k, agran, bias, gran = c
    return f"n{n}-k{k}-{gran}-{agran}" + ("-bias" if bias else "")


class Fp8Layer:
    def __init__(self, n: int, k: int, agran: str, bias: bool, seed: int, gran: str = "channel"):
        g = torch.Generator().manual_seed(seed)
        self.n, self.k, self.agran, self.gran = n, k, agran, gran
        w = torch.randn(n, k, generator=g) * 0.05
        q = w8a8.quantize(w, gran)
        self.weight, self.weight_scale = q.weight, q.weight_scale
        self.bias = torch.randn(n, generator=g) if bias else None
        self.w_gpu, self.s_gpu = self.weight.to(DEV), self.weight_scale.to(DEV)
        self.b_gpu = None if self.bias is None else self.bias.to(DEV)
        self.input_scale = None

    def set_input_scale(self, x: torch.Tensor) -> None:
        if self.agran == "tensor":  # 3/4 of the batch's amax: the largest inputs saturate
            self.input_scale = (bf16_round(x.float()).abs().amax() * 0.75 / 448.0).reshape(1).to(torch.float32)

    def launch(self, x2: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        si = None if self.input_scale is None else self.input_scale.to(DEV)
        return mcuda.launch_w8a8(x2, self.w_gpu, self.s_gpu, self.b_gpu, y, self.n, self.k, self.gran, "fp8",
                                 self.agran, input_scale=si)

    def run(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.full((x.shape[0], self.n), float("nan"), dtype=x.dtype, device=DEV)
        self.launch(x, y)
        torch.cuda.synchronize()
        return y

    def float64_reference(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The exact e4m3 products summed in float64, times sx * sw (per 128-k block where either is
        per block), plus bias; and the per-element sum of |terms| (same scaling) for the element-wise
        bound."""
        xq, sx = w8a8.quantize_activation(x.cpu(), self.agran, self.input_scale)
        acc, mag = fp8_float64(xq, sx, self.weight, self.weight_scale, self.gran, DEV)
        if self.bias is not None:
            acc = acc + self.bias.to(torch.float64).to(DEV)[None, :]
        return acc, mag


def _inputs(m: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * (0.5 + torch.rand(m, 1, generator=g) * 4)
    x[x == 0] = 0.125
    return x.to(dtype)


@pytest.fixture
def default_kernel(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)  # version 3's default: the FP8 wgmma kernel


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_rows_bitwise_identical_whatever_m(case, default_kernel):
    n, k, agran, bias, gran = case
    layer = Fp8Layer(n, k, agran, bias, seed=7, gran=gran)
    big = max(M_VALUES)
    x = _inputs(big, k, torch.float32, seed=99).to(DEV)
    layer.set_input_scale(x.cpu())
    rows = sorted(set(range(HEAD_ROWS)) | {r for m in M_VALUES for r in range(max(0, m - TAIL_ROWS), m)})
    single = torch.full((big, n), float("nan"), dtype=x.dtype, device=DEV)
    for i in rows:
        layer.launch(x[i:i + 1], single[i:i + 1])
    torch.cuda.synchronize()
    assert torch.isfinite(single[rows]).all(), "a 1-row launch left an element unwritten"
    bad = []
    for m in M_VALUES:
        y = layer.run(x[:m].contiguous())
        tested = [r for r in rows if r < m and (r < HEAD_ROWS or r >= m - TAIL_ROWS)]
        diff = (y[tested].view(torch.int32) != single[tested].view(torch.int32)).any(dim=1)
        if diff.any():
            bad.append(f"m={m}: rows {[tested[i] for i in diff.nonzero().flatten().tolist()][:8]} differ from "
                       "their 1-row launch")
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_run_to_run_identical_and_within_the_fp8_bound(case, default_kernel, monkeypatch):
    n, k, agran, bias, gran = case
    layer = Fp8Layer(n, k, agran, bias, seed=11, gran=gran)
    bad = []
    for m, dtype in RUN_CASES:
        x = _inputs(m, k, dtype, seed=5 + m).to(DEV)
        layer.set_input_scale(x.cpu())
        y1, y2 = layer.run(x), layer.run(x)
        if not torch.equal(y1.view(torch.int16), y2.view(torch.int16)):
            bad.append(f"m={m} {dtype}: two runs differ")
        ref, mag = layer.float64_reference(x)
        y64 = y1.to(torch.float64)
        assert torch.isfinite(y64).all(), "non-finite output (an element was not written?)"
        # The output's own rounding on top (float32: negligible; f16 / bf16: half an ulp).
        out_u = {torch.float32: 0.0, torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}[dtype]
        rel = ((y64 - ref).norm() / ref.norm()).item()
        if not rel <= FP8_BOUND + out_u:
            bad.append(f"m={m} {dtype}: norm-wise error {rel:.3g} > {FP8_BOUND + out_u:.3g}")
        worst = ((y64 - ref).abs() - out_u * ref.abs()) / mag.clamp_min(1e-30)
        if not worst.max().item() <= ELEMENT_BOUND:
            bad.append(f"m={m} {dtype}: an element is {worst.max().item():.3g} of its sum of |terms| off")
        if m == 1000:
            monkeypatch.setenv(ENV, "exact")
            y_exact = layer.run(x)
            monkeypatch.delenv(ENV)
            if torch.equal(y_exact.view(torch.int32), y1.view(torch.int32)):
                bad.append(f"m={m}: the same bits as the exact f16 path (did the FP8 kernel run by default?)")
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad)


# The launch variants of the FP8 wgmma kernel (w8a8ProjKernel.cu, fp8VariantSelected): the same bits.
# METRALE_W8A8_VARIANTS narrows them (benchmarks/device_run.sh w8a8v: those that passed its smoke run,
# so that a variant which hangs costs one timeout, not two).
VARIANTS = tuple(os.environ.get("METRALE_W8A8_VARIANTS", "wg-base,wg-q,wg-qe,wg-plain,wg-onetile,wg-persist,wg-pipe32").split(","))
VARIANT_M = (1, 9, 16, 17, 33, 64, 65, 127, 128, 129, 256, 1000, 4096)  # 1..16: 64-row CTAs by default


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_launch_variants_give_the_same_bits(case, monkeypatch):
    n, k, agran, bias, gran = case
    layer = Fp8Layer(n, k, agran, bias, seed=13, gran=gran)
    bad = []
    for m in VARIANT_M:
        for dtype in ((torch.float32, torch.float16, torch.bfloat16) if m in (65, 1000) else (torch.float32,)):
            x = _inputs(m, k, dtype, seed=17 + m).to(DEV)
            layer.set_input_scale(x.cpu())
            monkeypatch.delenv(ENV, raising=False)
            ref = layer.run(x)
            assert torch.isfinite(ref).all(), f"m={m} {dtype}: the default left an element unwritten"
            for v in VARIANTS:
                monkeypatch.setenv(ENV, v)
                y = layer.run(x)
                if not torch.equal(y.view(torch.int16), ref.view(torch.int16)):
                    nd = (y.view(torch.int16) != ref.view(torch.int16)).sum().item()
                    bad.append(f"m={m} {dtype} {v}: {nd} elements differ from the default's bits")
            monkeypatch.delenv(ENV, raising=False)
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad[:20])


def test_block_weights_past_the_scale_row_run_the_exact_path(monkeypatch):
    """block128 weights with more than 512 blocks of K (kFP8_SW_MAX: the CTA's weight-scale row in
    shared memory) run the exact path at every M (a function of the shape, so rows stay invariant):
    the bits of METRALE_W8A8_MMA=exact; at 512 blocks the FP8 kernel runs (bits of its own)."""
    bad = []
    for k, fp8 in ((512 * FP8_BLOCK + 16, False), (512 * FP8_BLOCK, True)):
        layer = Fp8Layer(128, k, "row_block128", False, seed=23, gran="block128")
        for m in (1, 40):
            x = _inputs(m, k, torch.float32, seed=29 + m).to(DEV)
            monkeypatch.delenv(ENV, raising=False)
            y = layer.run(x)
            monkeypatch.setenv(ENV, "exact")
            y_exact = layer.run(x)
            monkeypatch.delenv(ENV)
            same = torch.equal(y.view(torch.int32), y_exact.view(torch.int32))
            if same == fp8:
                bad.append(f"k={k} m={m}: " + ("the exact path's bits: the FP8 kernel did not run" if fp8
                                               else "not the exact path's bits past 512 blocks"))
    assert not bad, "\n".join(bad)
