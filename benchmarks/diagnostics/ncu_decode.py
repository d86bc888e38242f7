"""Decode launches for Nsight Compute: the dense projections and a whole MoE layer at small M.

    ncu --profile-from-start off --clock-control none --section ... \
        python -m benchmarks.diagnostics.ncu_decode [--m 1] [--shapes 8B-down,8B-up] [--moe 30B-A3B]

Each case is launched twice before the profiler starts (module loading, the L2 warm) and once
between cudaProfilerStart / cudaProfilerStop, so ncu sees one launch of every kernel of the case:
W4A16 (group 128, bf16 scales), W8A8 (channel FP8 weights, row FP8 activations) and W4A4 (NVFP4)
on each dense shape of benchmarks/bench_kernels.py, then, per MoE shape, the layer of
benchmarks/bench_moe_layer.py (router gate, router, gate_up, SwiGLU, down with the combine) in
W4A16 and W8A8. ncu flushes the caches before each replayed kernel (--cache-control all, its
default), so the weights come from DRAM as in the benchmarks' rotated runs. METRALE_STREAM and
METRALE_MOE_DECODE reach the launchers as usual.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench_kernels import SHAPES
from benchmarks.bench_moe import SHAPES as MOE_SHAPES
from benchmarks.bench_moe import routing
from benchmarks.bench_moe_layer import Layer, router_input
from metrale_export.ops import cuda as mcuda
from metrale_export.ops import w4a4, w4a16, w8a8


def dense_cases(shape: str, m: int):
    n, k = SHAPES[shape]
    dev = torch.device("cuda")
    w = torch.randn(n, k) * 0.02
    q4, q8, qf = w4a16.quantize(w, 128, True), w8a8.quantize(w, "channel"), w4a4.quantize(w)
    x = torch.randn(m, k, device=dev).to(torch.bfloat16)
    y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    t4 = [q4.weight.to(dev), q4.weight_scale.to(dev)]
    t8 = [q8.weight.to(dev), q8.weight_scale.to(dev)]
    tf = [qf.weight.to(dev), qf.weight_scale.to(dev), qf.weight_global_scale.to(dev)]
    return [
        (f"w4a16 {shape} M={m}", lambda: mcuda.launch_w4a16(x, t4[0], t4[1], None, None, y, n, k, 128)),
        (f"w8a8 {shape} M={m}", lambda: mcuda.launch_w8a8(x, t8[0], t8[1], None, y, n, k, "channel", "fp8", "row")),
        (f"w4a4 {shape} M={m}", lambda: mcuda.launch_w4a4(x, tf[0], tf[1], tf[2], None, None, y, n, k, "nvfp4")),
    ]


def moe_cases(shape: str, m: int, formats):
    h, inter, e, top_k = MOE_SHAPES[shape]
    out = []
    for fmt in formats:
        layer = Layer(fmt, h, inter, e, top_k, seed=1)
        ids = routing(m, e, top_k, "uniform", seed=0)[0]
        x = router_input(ids, h)
        out.append((f"moe {shape} {fmt} M={m}", lambda layer=layer, x=x: layer.forward(x)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="1")
    ap.add_argument("--shapes", default="8B-down,8B-up")
    ap.add_argument("--moe", default="30B-A3B")
    ap.add_argument("--moe-formats", default="w4a16,w8a8")
    args = ap.parse_args(argv)
    cases = []
    for m in (int(v) for v in args.m.split(",")):
        for s in filter(None, args.shapes.split(",")):
            cases += dense_cases(s, m)
        for s in filter(None, args.moe.split(",")):
            cases += moe_cases(s, m, args.moe_formats.split(","))
    for _, call in cases:
        call(), call()
    torch.cuda.synchronize()
    for name, call in cases:
        print(f"case {name}", flush=True)
        torch.cuda.cudart().cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
