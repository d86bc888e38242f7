"""GPU tests of the projection kernels (plugins/) through metrale_export.ops.cuda.

Per op, weight-scale granularity and activation format, on fresh seeded random non-zero inputs:
- agreement with a float64 evaluation of docs/ops.md and with the CPU reference ops, within the
  docs/ops.md tolerances, for M in {1, 2, 3, 7, 8, 16, 31, 64, 127, 128, 1000, 4096} and awkward N, K,
  into outputs poisoned with NaN (every element must be written);
- bitwise row invariance: row i of an M-row launch equals the 1-row launch of that row, for every M
  above and M = 8192 (its first 4096 rows and its last 64), so across every kernel tier (the 1-row
  launch streams, M >= 17 runs the wgmma tier on sm_90), and a permutation of the rows permutes the
  output bits;
- the torch custom ops dispatch to the kernels on CUDA tensors.
Skipped, with the reason, where no CUDA device is present; a CUDA machine without the built
library fails (the tests never pass vacuously).
"""

from __future__ import annotations

import zlib

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from metrale_export.ops import cuda as mcuda  # noqa: E402
from metrale_export.ops import tolerances, w4a4, w4a16, w8a8  # noqa: E402
from metrale_export.ops.numerics import bf16_round  # noqa: E402
from support.fp8_reference import fp8_float64  # noqa: E402

DEV = torch.device("cuda")
M_VALUES = (1, 2, 3, 7, 8, 16, 31, 64, 127, 128, 1000, 4096)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# (op, options, N, K): awkward N (odd, not a tile multiple) and K (a partial last 128-block); the
# narrow ones sum in up to 8 slices (projSlices), the wide ones in 2.
CASES = [
    ("w4a16", dict(group_size=128, symmetric=True, bias=True), 200, 1152),
    ("w4a16", dict(group_size=32, symmetric=False, bias=False), 197, 96),
    ("w4a16", dict(group_size=64, symmetric=False, bias=True), 72, 1088),
    # W4A16Proj version 2: a partial last group (K = 160 at group 128: 32 k; 1056 at 64: 32 k).
    ("w4a16", dict(group_size=128, symmetric=False, bias=True), 200, 160),
    ("w4a16", dict(group_size=64, symmetric=True, bias=False), 197, 1056),
    # Signed scales (the float quantizer stores m / -8, issue 15): every scale negated.
    ("w4a16", dict(group_size=32, symmetric=True, bias=True, negative_scales=True), 200, 1056),
    ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=True), 200, 1040),
    ("w8a8", dict(gran="block128", act="fp8", agran="row", bias=False), 197, 272),
    ("w8a8", dict(gran="channel", act="fp8", agran="row_block128", bias=False), 136, 1040),
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=True), 300, 400),
    # The static scale (activation_scale_granularity tensor, W8A8Proj version 2): no amax pre-pass;
    # 3/4 of the batch's amax, so the largest inputs saturate (docs/ops.md).
    ("w8a8", dict(gran="channel", act="fp8", agran="tensor", bias=True), 200, 1040),
    ("w8a8", dict(gran="block128", act="fp8", agran="tensor", bias=False), 300, 400),
    ("w8a8", dict(gran="channel", act="bf16", agran="row", bias=True), 200, 1040),
    ("w8a8", dict(gran="block128", act="bf16", agran="row", bias=False), 197, 272),
    ("w4a4", dict(act="nvfp4", input_scale=False, bias=True), 200, 1056),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=False), 197, 160),
    ("w4a4", dict(act="bf16", input_scale=False, bias=True), 136, 1056),
    # Wide weights: projSlices gives 2 or 4 slices of several blocks each (uneven: 3 + 2, 5 + 4), where
    # the narrow cases above get up to 8 slices of one or two blocks.
    ("w4a16", dict(group_size=128, symmetric=False, bias=False), 16400, 640),
    ("w4a16", dict(group_size=64, symmetric=True, bias=True), 8200, 1024),  # 4 slices
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False), 16400, 1040),
    ("w8a8", dict(gran="channel", act="fp8", agran="tensor", bias=False), 16400, 1040),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=True), 8200, 1024),
]


def _case_id(c):
    op, o, n, k = c
    return f"{op}-" + "-".join(f"{v}" for key, v in o.items() if key != "bias") + f"-n{n}-k{k}"


def _tolerance(op_fmt: str, dtype: torch.dtype) -> float:
    # The kernels may sum fp8 products on the FP8 tensor core (W8A8Proj version 3's default).
    return tolerances.op_output_bound(dtype, op_fmt, tensor_core=True)


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    y64, r64 = y.to(torch.float64), ref.to(torch.float64).to(y.device)
    assert torch.isfinite(y64).all(), "non-finite output (an element was not written?)"
    return ((y64 - r64).norm() / r64.norm()).item()


class Layer:
    """One quantized projection: its CPU weights, CUDA copies, and the three ways to run it."""

    def __init__(self, op: str, o: dict, n: int, k: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.op, self.o, self.n, self.k = op, o, n, k
        w = torch.randn(n, k, generator=g) * 0.05
        self.bias = torch.randn(n, generator=g) if o.get("bias") else None
        if op == "w4a16":
            q = w4a16.quantize(w, o["group_size"], o["symmetric"])
            scale = -q.weight_scale.abs() if o.get("negative_scales") else q.weight_scale
            self.cpu = dict(weight=q.weight, weight_scale=scale, zero_point=q.zero_point)
            self.fmt = "bf16"
        elif op == "w8a8":
            q = w8a8.quantize(w, o["gran"])
            self.cpu = dict(weight=q.weight, weight_scale=q.weight_scale)
            self.fmt = o["act"]
        else:
            q = w4a4.quantize(w)
            self.cpu = dict(weight=q.weight, weight_scale=q.weight_scale,
                            weight_global_scale=q.weight_global_scale)
            self.fmt = o["act"]
        self.gpu = {key: (None if v is None else v.to(DEV)) for key, v in self.cpu.items()}
        self.bias_gpu = None if self.bias is None else self.bias.to(DEV)
        self.input_scale = None

    def set_input_scale(self, x: torch.Tensor) -> None:
        if self.op == "w4a4" and self.o.get("input_scale"):
            amax = bf16_round(x.float()).abs().amax()
            self.input_scale = (amax / 2688.0).reshape(1).to(torch.float32)
        if self.op == "w8a8" and self.o.get("agran") == "tensor":
            amax = bf16_round(x.float()).abs().amax()
            self.input_scale = (amax * 0.75 / 448.0).reshape(1).to(torch.float32)

    def launch(self, x2: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        n, k, o, gp = self.n, self.k, self.o, self.gpu
        if self.op == "w4a16":
            return mcuda.launch_w4a16(x2, gp["weight"], gp["weight_scale"], gp["zero_point"], self.bias_gpu,
                                      y, n, k, o["group_size"])
        si = None if self.input_scale is None else self.input_scale.to(DEV)
        if self.op == "w8a8":
            return mcuda.launch_w8a8(x2, gp["weight"], gp["weight_scale"], self.bias_gpu, y, n, k, o["gran"],
                                     o["act"], o["agran"], input_scale=si)
        return mcuda.launch_w4a4(x2, gp["weight"], gp["weight_scale"], gp["weight_global_scale"], si,
                                 self.bias_gpu, y, n, k, o["act"])

    def run(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel on x (CUDA), into a NaN-poisoned output."""
        y = torch.full((x.shape[0], self.n), float("nan"), dtype=x.dtype, device=DEV)
        self.launch(x, y)
        torch.cuda.synchronize()
        return y

    def cpu_reference(self, x: torch.Tensor) -> torch.Tensor:
        c, o = self.cpu, self.o
        if self.op == "w4a16":
            return w4a16.proj(x, c["weight"], c["weight_scale"], c["zero_point"], self.bias, o["group_size"])
        if self.op == "w8a8":
            return w8a8.proj(x, c["weight"], c["weight_scale"], self.bias, o["gran"], o["act"], o["agran"],
                             self.input_scale)
        return w4a4.proj(x, c["weight"], c["weight_scale"], c["weight_global_scale"], self.input_scale,
                         self.bias, o["act"])

    def float64_reference(self, x: torch.Tensor) -> torch.Tensor:
        """docs/ops.md evaluated in float64 from the exactly quantized operands (on the GPU)."""
        c, o, n, k = self.cpu, self.o, self.n, self.k
        d = lambda t: t.to(torch.float64).to(DEV)  # noqa: E731
        if self.op == "w4a16":
            wb = bf16_round(w4a16.dequantize(c["weight"], c["weight_scale"], c["zero_point"], o["group_size"]))
            acc = d(bf16_round(x.float())) @ d(wb).T
        elif self.op == "w8a8" and o["act"] == "bf16":
            wb = bf16_round(w8a8.dequantize(c["weight"], c["weight_scale"], o["gran"]))
            acc = d(bf16_round(x.float())) @ d(wb).T
        elif self.op == "w8a8":
            xq, sx = w8a8.quantize_activation(x, o["agran"], self.input_scale)
            acc, _ = fp8_float64(xq, sx, c["weight"], c["weight_scale"], o["gran"], DEV)
        elif o["act"] == "bf16":
            gw = c["weight_global_scale"].float().reshape(())
            wb = bf16_round(w4a4.dequantize_factors(c["weight"], c["weight_scale"]) * gw)
            acc = d(bf16_round(x.float())) @ d(wb).T
        else:
            a, ga = w4a4.quantize_activation(x, self.input_scale)
            wf = w4a4.dequantize_factors(c["weight"], c["weight_scale"])
            acc = (d(a) @ d(wf).T) * (d(ga) * d(c["weight_global_scale"]).reshape(()))
        if self.bias is not None:
            acc = acc + d(self.bias)[None, :]
        return acc


def _inputs(m: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * (0.5 + torch.rand(m, 1, generator=g) * 4)
    x[x == 0] = 0.125  # non-zero inputs
    return x.to(dtype)


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_float64_contract_and_cpu_reference(case):
    op, o, n, k = case
    layer = Layer(op, o, n, k, seed=zlib.crc32(_case_id(case).encode()) % 10_000)
    fails = []
    for i, m in enumerate(M_VALUES):
        dtype = DTYPES[i % 3]
        x = _inputs(m, k, dtype, seed=1000 + i)
        layer.set_input_scale(x)
        y = layer.run(x.to(DEV))
        tol = _tolerance(layer.fmt, dtype)
        e64 = _rel(y, layer.float64_reference(x))
        ecpu = _rel(y, layer.cpu_reference(x))
        if not (e64 <= tol and ecpu <= 2 * tol):
            fails.append(f"m={m} {dtype}: vs float64 {e64:.3g}, vs CPU reference {ecpu:.3g} (tol {tol:g})")
    assert not fails, f"{_case_id(case)}:\n" + "\n".join(fails)


# Row invariance also at M = 8192 (the largest batch), for the rows at its end as well as its start.
INVARIANCE_M = M_VALUES + (8192,)
TAIL_ROWS = 64


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_row_invariance_bitwise(case):
    op, o, n, k = case
    layer = Layer(op, o, n, k, seed=7)
    big = max(INVARIANCE_M)
    x = _inputs(big, k, torch.float32, seed=99).to(DEV)
    layer.set_input_scale(x.cpu())
    # Each tested row alone (the 1-row launch), batched with CUDA graphs off: one launch per row.
    rows = list(range(max(M_VALUES))) + list(range(big - TAIL_ROWS, big))
    single = torch.full((big, n), float("nan"), dtype=x.dtype, device=DEV)
    for i in rows:
        layer.launch(x[i:i + 1], single[i:i + 1])
    torch.cuda.synchronize()
    tested = torch.zeros(big, dtype=torch.bool, device=DEV)
    tested[rows] = True
    bad = []
    for m in INVARIANCE_M:
        y = layer.run(x[:m].contiguous())
        diff = (y.view(torch.int32) != single[:m].view(torch.int32)).any(dim=1) & tested[:m]
        if diff.any():
            rows_bad = diff.nonzero().flatten().tolist()
            bad.append(f"m={m}: rows {rows_bad[:8]}{'...' if len(rows_bad) > 8 else ''} differ from their 1-row launch")
    perm = torch.randperm(1000, generator=torch.Generator().manual_seed(3)).to(DEV)
    yp = layer.run(x[:1000][perm].contiguous())
    if not torch.equal(yp.view(torch.int32), single[:1000][perm].view(torch.int32)):
        bad.append("m=1000 permuted: a row's bits depend on its position")
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad)


def test_custom_ops_dispatch_to_cuda():
    layer = Layer("w4a16", dict(group_size=128, symmetric=True, bias=True), 256, 512, seed=5)
    x = _inputs(5, 512, torch.bfloat16, seed=6)
    c = layer.cpu
    y = torch.ops.metrale.w4a16_proj(x.to(DEV), c["weight"].to(DEV), c["weight_scale"].to(DEV), None,
                                     layer.bias_gpu, 256, 512, 128, "bf16", "ffn", "test.w4a16")
    assert y.device.type == "cuda" and y.dtype == torch.bfloat16 and y.shape == (5, 256)
    assert torch.equal(y, layer.run(x.to(DEV)))
    ref = torch.ops.metrale.w4a16_proj(x, c["weight"], c["weight_scale"], None, layer.bias, 256, 512, 128,
                                       "bf16", "ffn", "test.w4a16")
    assert _rel(y, ref) <= tolerances.op_output_bound(y.dtype)


def test_unsupported_k_is_a_clear_error():
    layer = Layer("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False), 64, 136, seed=1)
    x = _inputs(2, 136, torch.float32, seed=2).to(DEV)
    with pytest.raises(mcuda.KernelLibraryError, match="multiple of 16"):
        layer.run(x)


W4A16_CASES = [c for c in CASES if c[0] == "w4a16"]
# METRALE_W4A16_WG's values compared, the first the reference (projWgmma.cuh's wgDeepVariant).
W4A16_VARIANTS = ("base", "default", "persist", "deep", "t64", "t128")


@pytest.mark.parametrize("case", W4A16_CASES, ids=[_case_id(c) for c in W4A16_CASES])
def test_w4a16_wgmma_variants_give_the_same_bits(case, monkeypatch):
    """The W4A16 wgmma tier's variants give the same bits at every M of the tier (both token tiles, the
    split included): the base mainloop (METRALE_W4A16_WG=base), the deep one with persistent CTAs where
    the tiles outnumber the SMs (the default: the wide cases at M >= 256), one tile a CTA (deep), and the
    token tile forced to 64 or 128 at M > 64 (t64, t128). Each within the tolerance of the float64
    evaluation (not vacuously equal: poisoned y)."""
    op, o, n, k = case
    env, variants = "METRALE_W4A16_WG", W4A16_VARIANTS
    layer = Layer(op, o, n, k, seed=11)
    x = _inputs(4096, k, torch.bfloat16, seed=5).to(DEV)
    bad = []
    for m in (17, 64, 100, 256, 1000, 4096):
        xm = x[:m].contiguous()
        out = {}
        for variant in variants:
            if variant == "default":
                monkeypatch.delenv(env, raising=False)
            else:
                monkeypatch.setenv(env, variant)
            out[variant] = layer.run(xm)
        ref, exact = variants[0], layer.float64_reference(xm.cpu())
        for variant in variants[1:]:
            a, b = out[ref].view(torch.int16), out[variant].view(torch.int16)
            if not torch.equal(a, b):
                bad.append(f"m={m}: {(a != b).sum().item()} elements differ between {env}={ref} and {variant}")
            err = _rel(out[variant], exact)
            if not err <= _tolerance(layer.fmt, xm.dtype):
                bad.append(f"m={m}: {env}={variant} error {err:.3g} against float64")
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad)
