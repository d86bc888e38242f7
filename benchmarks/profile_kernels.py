"""Run a few projection launches once each, for Nsight Compute (ncu) to profile.

    ncu --kernel-name regex:proj --launch-skip 0 python -m benchmarks.profile_kernels [--m 1,4096] [--shape 8B-up]

Cases: W4A16 (group 128), W8A8 (per-channel FP8 weights, per-row FP8 activations) and W4A4 (NVFP4)
at each M on one shape of benchmarks/bench_kernels.py (default the Qwen3-8B up projection).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench_kernels import SHAPES
from metrale_export.ops import cuda as mcuda
from metrale_export.ops import w4a4, w4a16, w8a8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8B-up", choices=sorted(SHAPES))
    ap.add_argument("--m", default="1,4096", help="comma-separated row counts")
    ap.add_argument("--ops", default="w4a16,w8a8,w4a4")
    args = ap.parse_args()
    n, k = SHAPES[args.shape]
    ops = args.ops.split(",")
    w = torch.randn(n, k) * 0.02
    dev = torch.device("cuda")
    q4 = w4a16.quantize(w, 128, True) if "w4a16" in ops else None
    q8 = w8a8.quantize(w, "channel") if "w8a8" in ops else None
    qf = w4a4.quantize(w) if "w4a4" in ops else None
    for m in (int(v) for v in args.m.split(",")):
        x = torch.randn(m, k, device=dev).to(torch.bfloat16)
        y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        if q4 is not None:
            mcuda.launch_w4a16(x, q4.weight.to(dev), q4.weight_scale.to(dev), None, None, y, n, k, 128)
        if q8 is not None:
            mcuda.launch_w8a8(x, q8.weight.to(dev), q8.weight_scale.to(dev), None, y, n, k, "channel", "fp8", "row")
        if qf is not None:
            mcuda.launch_w4a4(x, qf.weight.to(dev), qf.weight_scale.to(dev), qf.weight_global_scale.to(dev), None, None,
                              y, n, k, "nvfp4")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
