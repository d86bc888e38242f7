"""GPU test of the W4A16 promotion probe (METRALE_STREAM=promo, plugins/w4a16Proj/w4a16ProjKernel.cuh's
W4A16PromoProbePolicy): a measurement probe, not the contract's arithmetic, for timing what a W4A16
version that scales each group's sum (instead of rounding every weight to bf16) would save in the
streaming tier. Its timings are only worth reading if it computes that arithmetic, which this
checks: with float32 x and y (no output rounding), at every M = 1..16 (both activation tiles), with
and without zero points, its error against the float64 product of bf16(x) and the exact weights
``(code - z) * s`` is at the float32 accumulation's level (< 1e-4), at least 10x below version 2's
kernel (whose per-weight bf16 rounding the probe leaves out), and every output is written.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_proj_kernels import DEV, Layer, _inputs, _rel  # noqa: E402

from metrale_export.ops import w4a16  # noqa: E402
from metrale_export.ops.numerics import bf16_round  # noqa: E402

CASES = [(dict(group_size=128, symmetric=True, bias=False), 4096, 2048),
         (dict(group_size=128, symmetric=False, bias=False), 1000, 4096)]


@pytest.mark.parametrize("case", CASES, ids=["symmetric-n4096-k2048", "zero-points-n1000-k4096"])
def test_promo_probe_computes_the_group_promotion(case, monkeypatch):
    o, n, k = case
    layer = Layer("w4a16", o, n, k, seed=5)
    c = layer.cpu
    w_exact = w4a16.dequantize(c["weight"], c["weight_scale"], c["zero_point"], o["group_size"])
    x = _inputs(16, k, torch.float32, seed=9)
    bad = []
    for m in range(1, 17):
        xm = x[:m].contiguous()
        ref = (bf16_round(xm.float()).to(torch.float64) @ w_exact.to(torch.float64).T).to(DEV)
        monkeypatch.delenv("METRALE_STREAM", raising=False)
        e_v2 = _rel(layer.run(xm.to(DEV)), ref)
        monkeypatch.setenv("METRALE_STREAM", "promo")
        e_probe = _rel(layer.run(xm.to(DEV)), ref)  # _rel: every element written (NaN-poisoned output)
        monkeypatch.delenv("METRALE_STREAM")
        if not (e_probe < 1e-4 and e_probe * 10 < e_v2):
            bad.append(f"m={m}: probe error {e_probe:.3g}, version 2's {e_v2:.3g}")
    assert not bad, "\n".join(bad)
