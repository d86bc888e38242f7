"""GPU tests of the non-projection kernels (plugins/rmsNorm, floatProj, router) through
metrale_export.ops.cuda.

- against a float64 evaluation of docs/ops.md (tolerances.OP_NON_PROJECTION_GPU by dtype) and the
  CPU reference ops (the router's ids equal), every output finite;
- bitwise row invariance: row i of an M-row launch equals the 1-row launch of that row, for M in
  1..8192 (at 8192 its first rows and its last 64, a row at the end of a large batch), for every
  variant (residual, gate, (1 + w)) and both row groups (a warp: K <= 1024; a CTA above);
- FloatProj at M = 1..8192 across every projection tier.
Skipped, with the reason, where no CUDA device is present; a CUDA machine without the built
library fails.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from metrale_export.ops import cuda as mcuda  # noqa: E402
from metrale_export.ops import float_proj, norms, router, tolerances  # noqa: E402
from metrale_export.ops.numerics import bf16_round  # noqa: E402

DEV = torch.device("cuda")
M_VALUES = (1, 2, 3, 7, 8, 16, 31, 64, 127, 128, 1000, 4096, 8192)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
NORM_K = (128, 1024, 4096, 8192)  # q/k norm (a warp a row), the warp limit, 8B hidden, a CTA row
VARIANTS = ("plain", "residual", "gate", "offset")


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _norm_inputs(m, k, dtype, variant, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = (torch.randn(m, k, generator=g, device=DEV) * 2).to(dtype)
    w = torch.randn(k, generator=g, device=DEV).to(dtype)
    res = torch.randn(m, k, generator=g, device=DEV).to(dtype) if variant == "residual" else None
    gate = torch.randn(m, k, generator=g, device=DEV).to(dtype) if variant == "gate" else None
    return x, w, res, gate, int(variant == "offset")


def _norm(x, w, res, gate, offset):
    return mcuda.rms_norm_cuda(x, w, res, gate, x.shape[-1], 1e-6, offset, "", "test.norm")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", NORM_K)
@pytest.mark.parametrize("variant", VARIANTS)
def test_rms_norm_matches_float64_and_the_cpu_reference(dtype, k, variant):
    x, w, res, gate, offset = _norm_inputs(1000, k, dtype, variant, k)
    y, s = _norm(x, w, res, gate, offset)
    assert torch.isfinite(y.float()).all()
    ref64 = norms.rms_norm_f64(x.cpu(), w.cpu(), None if res is None else res.cpu(),
                               None if gate is None else gate.cpu(), 1e-6, offset)
    name = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    assert _rel(y.cpu(), ref64) <= tolerances.OP_NON_PROJECTION_GPU[name]
    cpu, cpu_s = norms.rms_norm(x.cpu(), w.cpu(), None if res is None else res.cpu(),
                                None if gate is None else gate.cpu(), 1e-6, offset)
    assert _rel(y.cpu(), cpu) <= tolerances.OP_NON_PROJECTION_GPU[name]
    assert torch.equal(s.cpu(), cpu_s)  # the residual add is one rounding, the same on both


@pytest.mark.parametrize("k", NORM_K)
@pytest.mark.parametrize("variant", VARIANTS)
def test_rms_norm_rows_are_bitwise_invariant_to_m(k, variant):
    x, w, res, gate, offset = _norm_inputs(8192, k, torch.bfloat16, variant, 7 + k)
    alone = [_norm(x[i:i + 1], w, None if res is None else res[i:i + 1], None if gate is None else gate[i:i + 1],
                   offset)[0] for i in range(64)]
    tail = [_norm(x[i:i + 1], w, None if res is None else res[i:i + 1], None if gate is None else gate[i:i + 1],
                  offset)[0] for i in range(8192 - 64, 8192)]
    for m in M_VALUES:
        y = _norm(x[:m], w, None if res is None else res[:m], None if gate is None else gate[:m], offset)[0]
        for i in range(min(m, 64)):
            assert torch.equal(y[i], alone[i][0]), (m, i)
    y = _norm(x, w, res, gate, offset)[0]
    for j, i in enumerate(range(8192 - 64, 8192)):
        assert torch.equal(y[i], tail[j][0]), i


FLOAT_CASES = [(151936 // 8, 4096), (4096, 4096), (64, 2048), (200, 1152)]  # lm_head slice, square, router, odd


def _proj_inputs(m, n, k, dtype, seed, bias=False):
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, k, generator=g, device=DEV).to(dtype)
    w = (torch.randn(n, k, generator=g, device=DEV) * 0.05).to(torch.bfloat16)
    b = torch.randn(n, generator=g, device=DEV) if bias else None
    return x, w, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", FLOAT_CASES)
def test_float_proj_matches_float64_and_the_cpu_reference(dtype, n, k):
    for m in (1, 7, 16, 31, 128, 1000):
        x, w, b = _proj_inputs(m, n, k, dtype, m + n, bias=True)
        y = mcuda.float_proj_cuda(x, w, b, n, k, "head", "lm_head")
        ref64 = bf16_round(x.float()).double().cpu() @ w.double().cpu().T + b.double().cpu()
        bound = 1e-5 if dtype == torch.float32 else tolerances.OP_NON_PROJECTION_GPU[
            "float16" if dtype == torch.float16 else "bfloat16"]
        assert torch.isfinite(y.float()).all()
        assert _rel(y.cpu(), ref64) <= bound, (m, n, k)
        assert _rel(y.cpu(), float_proj.proj(x.cpu(), w.cpu(), b.cpu())) <= bound


@pytest.mark.parametrize("n,k", FLOAT_CASES)
def test_float_proj_rows_are_bitwise_invariant_to_m(n, k):
    x, w, _ = _proj_inputs(8192, n, k, torch.bfloat16, 3)
    alone = torch.cat([mcuda.float_proj_cuda(x[i:i + 1], w, None, n, k, "head", "lm_head") for i in range(16)])
    tail = torch.cat([mcuda.float_proj_cuda(x[i:i + 1], w, None, n, k, "head", "lm_head")
                      for i in range(8192 - 16, 8192)])
    for m in M_VALUES:
        y = mcuda.float_proj_cuda(x[:m], w, None, n, k, "head", "lm_head")
        assert torch.equal(y[:min(m, 16)], alone[:min(m, 16)]), m
    assert torch.equal(mcuda.float_proj_cuda(x, w, None, n, k, "head", "lm_head")[-16:], tail)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("experts,top_k", [(8, 2), (128, 8), (512, 10)])
def test_router_matches_the_reference_and_is_row_invariant(dtype, experts, top_k):
    g = torch.Generator(device=DEV).manual_seed(experts)
    logits = (torch.randn(4096, experts, generator=g, device=DEV) * 2).to(dtype)
    logits[0, 1] = logits[0, 3] = logits[0].max() + 1  # a tie at the top: the lower id first
    for normalize in (0, 1):
        ids, w = mcuda.router_cuda(logits, experts, top_k, normalize, "moe", "router")
        cpu_ids, cpu_w = router.route(logits.cpu(), top_k, normalize)
        assert torch.equal(ids.cpu(), cpu_ids)
        assert ids[0, 0] == 1 and ids[0, 1] == 3
        bound = 1e-5 if dtype == torch.float32 else tolerances.OP_NON_PROJECTION_GPU[
            "float16" if dtype == torch.float16 else "bfloat16"]
        assert _rel(w.cpu(), cpu_w) <= bound
        for m in (1, 3, 31, 1000):
            i2, w2 = mcuda.router_cuda(logits[:m], experts, top_k, normalize, "moe", "router")
            assert torch.equal(i2, ids[:m]) and torch.equal(w2, w[:m]), m
        last_i, last_w = mcuda.router_cuda(logits[-1:], experts, top_k, normalize, "moe", "router")
        assert torch.equal(last_i[0], ids[-1]) and torch.equal(last_w[0], w[-1])


def test_the_torch_ops_dispatch_to_the_kernels():
    x, w, res, _, _ = _norm_inputs(5, 256, torch.bfloat16, "residual", 0)
    y, s = torch.ops.metrale.rms_norm(x.reshape(1, 5, 256), w, res.reshape(1, 5, 256), None, 256, 1e-6, 0, "", "n")
    y2, s2 = _norm(x, w, res, None, 0)
    assert torch.equal(y.reshape(5, 256), y2) and torch.equal(s.reshape(5, 256), s2)
