"""Accuracy of W8A8Proj's fp8 activations on the GPU against a float64 evaluation of docs/ops.md.

    python -m benchmarks.fp8_accuracy [--out DIR]

Per K and scale combination: the relative Frobenius error of the float32 output against float64
(docs/ops.md's tolerance table bounds it), on random weights and activations with per-row
magnitudes spread over 2^-1..2^3 (as tests/gpu draws them); writes fp8-accuracy-YYYYMMDD-HHMM-<commit>.md into
--out. The kernels multiply e4m3 values exactly (f16 products, float32 sums): about 1e-7. An FP8
wgmma evaluation (its short accumulator, promoted to float32 per 128-k block) measured 1.3e-4 with
this script at a24630d (benchmarks/results/fp8-accuracy-20261201-1209-a24630d.md; that tier was measured and not
kept, plugins/KERNELS.md).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import torch

from benchmarks.bench_kernels import bench_parser, require_cuda
from metrale_export.ops import cuda as mcuda
from metrale_export.ops import w8a8
from metrale_export.ops.numerics import FP8_BLOCK, e4m3_from_bits

N, M = 1024, 64
KS = (1040, 4096, 12288, 25600)
COMBOS = (("channel", "row"), ("block128", "row"), ("channel", "row_block128"))


def float64_reference(x, q, gran, agran, n, k):
    xq, sx = w8a8.quantize_activation(x, agran)
    wq = e4m3_from_bits(q.weight).double().cuda()
    sw = w8a8.expand_weight_scale(q.weight_scale, gran, n, k).double().cuda()
    acc = torch.zeros(x.shape[0], n, dtype=torch.float64, device="cuda")
    for b in range(-(-k // FP8_BLOCK)):
        ks = slice(b * FP8_BLOCK, min(k, (b + 1) * FP8_BLOCK))
        sxb = (sx[:, :1] if agran == "row" else sx[:, b:b + 1]).double().cuda()
        acc += (xq[:, ks].double().cuda() @ wq[:, ks].T) * sxb * sw[:, b * FP8_BLOCK][None, :]
    return acc


def main(argv=None) -> int:
    ap = bench_parser(__doc__)
    args = ap.parse_args(argv)
    require_cuda("fp8_accuracy")
    lines = ["| K | weight scales | activation scales | rel. error vs float64 (float32 output) |", "|---|---|---|---|"]
    for k in KS:
        g = torch.Generator().manual_seed(k)
        w = torch.randn(N, k, generator=g) * 0.05
        x = torch.randn(M, k, generator=g) * (0.5 + torch.rand(M, 1, generator=g) * 4)
        for gran, agran in COMBOS:
            q = w8a8.quantize(w, gran)
            y = torch.full((M, N), float("nan"), device="cuda")
            mcuda.launch_w8a8(x.cuda(), q.weight.cuda(), q.weight_scale.cuda(), None, y, N, k, gran, "fp8", agran)
            torch.cuda.synchronize()
            ref = float64_reference(x, q, gran, agran, N, k)
            err = ((y.double() - ref).norm() / ref.norm()).item()
            lines.append(f"| {k} | {gran} | {agran} | {err:.3g} |")
            print(lines[-1], flush=True)
    stamp = dt.datetime.now(dt.timezone.utc)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    commit = os.environ.get("METRALE_COMMIT", "unknown")
    text = [f"# W8A8 fp8 accuracy, {stamp.isoformat(timespec='seconds')}, commit {commit}", "",
            f"{props.name}; M = {M}, N = {N}.", ""] + lines
    (out / f"fp8-accuracy-{stamp:%Y%m%d-%H%M}-{commit[:7]}.md").write_text("\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
