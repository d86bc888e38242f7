"""Where the time of a W8A8 FP8 wgmma call goes: the device time of each kernel of one call, per
variant of METRALE_W8A8_MMA, beside torch._scaled_mm (FP8 cuBLASLt, the GEMM alone), from
torch.profiler's CUDA activity records (one GPU):

    python -m benchmarks.bench_w8a8_stages [--out DIR] [--m 64,256,1024,4096] [--variants wg-base,wg-q]

Per shape of benchmarks/bench_kernels.py and M: the mean device time of each kernel over ITERS calls
(weights rotated past the L2 as bench_kernels does; no graph, so launch gaps are not counted), named
by stage: `quant` (quantFp8Kernel), `layout` (wgFp8OperandKernel), `fused` (wgFp8QuantKernel), `gemm`
(projWgmmaFp8Kernel or its cluster variant), their sum, and cuBLASLt's kernels' sum; the GEMM's
TFLOP/s and its share of the sum. Writes w8a8-stages-YYYYMMDD-HHMM-<commit>.md into --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from metrale_export.ops import cuda as mcuda

from .bench_kernels import SHAPES, _commit, write_markdown
from .bench_w8a8_variants import channel_weight_copies

ENV = "METRALE_W8A8_MMA"
ITERS = 12
STAGES = (("fused", "wgFp8QuantKernel"), ("quant", "quantFp8Kernel"), ("layout", "wgFp8OperandKernel"),
          ("gemm", "projWgmmaFp8"))


def _kernel_times(fn, iters: int) -> dict[str, float]:
    """Mean device seconds per call of each kernel name that fn's calls launch."""
    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(iters):
            fn(i)
        torch.cuda.synchronize()
    out: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:  # a kernel (or copy) on the device
            out[ev.name] = out.get(ev.name, 0.0) + ev.time_range.elapsed_us() * 1e-6 / iters
    return out


def _stage(name: str) -> str:
    for stage, key in STAGES:
        if key in name:
            return stage
    return "other"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results"))
    ap.add_argument("--m", default="64,256,1024,4096")
    ap.add_argument("--variants", default="wg-base,wg-q")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args(argv)
    if not mcuda.available():
        raise SystemExit("bench_w8a8_stages: needs a CUDA GPU and the kernel library ('make plugins')")
    dev = torch.device("cuda")
    variants = args.variants.split(",")
    stamp = dt.datetime.now(dt.timezone.utc)
    cols = ["fused", "quant", "layout", "gemm", "other"]
    lines = [f"# W8A8 FP8 wgmma stages ({ENV}), {stamp:%Y-%m-%d %H:%M} UTC, commit {_commit()}", "",
             f"{torch.cuda.get_device_properties(0).name}; torch {torch.__version__}; mean device time per call of "
             f"each kernel (torch.profiler, {ITERS} calls, weights rotated past the L2, no graph), us.", "",
             "| shape | M | variant | " + " | ".join(cols)
             + " | sum | gemm TF/s | gemm share | cuBLASLt | sum / cuBLASLt |",
             "|---|---|---|" + "---|" * (len(cols) + 5)]
    print("\n".join(lines), flush=True)
    try:
        for sname in args.shapes.split(","):
            n, k = SHAPES[sname]
            c_w8, c_fp8, sw_row = channel_weight_copies(n, k, dev)
            for m in [int(v) for v in args.m.split(",")]:
                x = (torch.randn(m, k, device=dev) * 0.5).to(torch.bfloat16)
                y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
                mp = max(16, -(-m // 16) * 16)
                xq = torch.randn(mp, k, device=dev).to(torch.float8_e4m3fn)
                sa = torch.rand(mp, 1, device=dev) + 0.5
                t_lt = sum(_kernel_times(lambda i: torch._scaled_mm(
                    xq, c_fp8[i % len(c_fp8)].t(), scale_a=sa, scale_b=sw_row, out_dtype=torch.bfloat16),
                    ITERS).values())
                for v in variants:
                    os.environ[ENV] = v
                    kt = _kernel_times(lambda i: mcuda.launch_w8a8(x, c_w8[i % len(c_w8)][0], c_w8[i % len(c_w8)][1],
                                                                   None, y, n, k, "channel", "fp8", "row"), ITERS)
                    st = {c: 0.0 for c in cols}
                    for name, t in kt.items():
                        st[_stage(name)] += t
                    tot = sum(st.values())
                    gemm = st["gemm"]
                    tf = 2.0 * m * n * k / gemm / 1e12 if gemm > 0 else 0.0
                    line = (f"| {sname} | {m} | {v} | " + " | ".join(f"{st[c] * 1e6:.1f}" for c in cols)
                            + f" | {tot * 1e6:.1f} | {tf:.0f} | {gemm / tot if tot else 0:.2f} | {t_lt * 1e6:.1f} | "
                            f"{tot / t_lt:.2f} |")
                    print(line, flush=True)
                    lines.append(line)
            del c_w8, c_fp8
            torch.cuda.empty_cache()
    finally:
        os.environ.pop(ENV, None)
    write_markdown(args.out, "w8a8-stages", f"{stamp:%Y%m%d-%H%M}", lines)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
