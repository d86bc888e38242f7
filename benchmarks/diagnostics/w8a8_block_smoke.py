"""Smoke run of W8A8's block-scaled FP8 wgmma kernel before its tests and benchmark (device_run.sh
w8a8blk): each scale combination (block128 weights x row / tensor / row_block128 activations,
channel weights x row_block128) at a few M, the default kernel against the CPU reference within
docs/ops.md's fp8 bound on the FP8 tensor core, and a row alone vs in its batch bitwise. One line a
case; exit 1 on a failure. A hang (a stage's byte count the producer and consumers disagree on) is
the caller's timeout.

    python -m benchmarks.diagnostics.w8a8_block_smoke
"""

from __future__ import annotations

import sys

import torch

from metrale_export.ops import cuda as mcuda
from metrale_export.ops import tolerances, w8a8

CASES = (("block128", "row_block128"), ("block128", "row"), ("block128", "tensor"), ("channel", "row_block128"))


def run_case(gran: str, agran: str, n: int, k: int, m: int) -> tuple[bool, str]:
    g = torch.Generator().manual_seed(n + k + m)
    w = torch.randn(n, k, generator=g) * 0.05
    q = w8a8.quantize(w, gran)
    x = torch.randn(m, k, generator=g) * (0.5 + torch.rand(m, 1, generator=g) * 4)
    si = None
    if agran == "tensor":
        si = (x.abs().amax() * 0.75 / 448.0).reshape(1).float()
    dev = torch.device("cuda")
    wg, sg = q.weight.to(dev), q.weight_scale.to(dev)

    def launch(xx):
        y = torch.full((xx.shape[0], n), float("nan"), device=dev)
        mcuda.launch_w8a8(xx.to(dev).contiguous(), wg, sg, None, y, n, k, gran, "fp8", agran,
                          input_scale=None if si is None else si.to(dev))
        torch.cuda.synchronize()
        return y.cpu()

    y = launch(x)
    ref = w8a8.proj(x, q.weight, q.weight_scale, None, gran, "fp8", agran, si)
    rel = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
    bound = tolerances.OP_FP8_TENSOR_CORE
    alone = launch(x[m - 1:m])
    same = torch.equal(alone.view(torch.int32), y[m - 1:m].view(torch.int32))
    ok = bool(torch.isfinite(y).all()) and rel <= bound and same
    return ok, f"{gran:8s} x {agran:12s} n={n} k={k} m={m}: rel {rel:.3g} (bound {bound:g}), last row alone bitwise {same}"


def main() -> int:
    fails = 0
    for gran, agran in CASES:
        for n, k, m in ((300, 400, 1), (300, 400, 40), (4096, 4096, 300)):
            ok, line = run_case(gran, agran, n, k, m)
            print(("ok   " if ok else "FAIL ") + line, flush=True)
            fails += not ok
    print(f"w8a8_block_smoke: {fails} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
