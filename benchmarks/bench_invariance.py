"""Benchmark of the non-projection kernels on the GPU, with their anchors measured in the same run.

- RMSNorm (plugins/rmsNorm) vs ``torch.nn.functional.rms_norm``, and its bytes moved (x read, y
  written, plus the residual read and s written) as a fraction of the copy bandwidth measured here
  (``torch.Tensor.copy_`` of the same bytes), GPU times from CUDA graphs, the op's host time apart;
- FloatProj (plugins/floatProj) vs cuBLAS bf16 (``torch.mm``) at M in {1, 8, 16, 64, 256, 1024, 4096}
  on lm_head and 8B shapes.
Median of repeats (CUDA events), ratio columns; writes a markdown table to ``--out``.

    python -m benchmarks.bench_invariance --out $OUT
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.bench_kernels import L2_BYTES, _commit, time_graph
from metrale_export.ops import cuda as mcuda

NORM_SHAPES = [(m, k) for k in (128, 4096, 8192) for m in (1, 16, 256, 4096, 32768)]
PROJ_SHAPES = {"lm_head 151936x4096": (151936, 4096), "8B qkv 6144x4096": (6144, 4096),
               "8B down 4096x12288": (4096, 12288), "router 128x4096": (128, 4096)}
PROJ_M = (1, 8, 16, 64, 256, 1024, 4096)


def timed(fn, repeats: int = 30, warmup: int = 5) -> float:
    """Median microseconds of ``fn`` over ``repeats`` CUDA-event timings."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def _host_us(fn, calls: int = 200) -> float:
    """Host microseconds a call: ``calls`` calls back to back (the launch queue never fills at the
    shapes this is read for), then one synchronize outside the clock."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t / calls * 1e6


def _norm_row(m: int, k: int, residual: bool) -> str:
    """One RMSNorm row: the op's call (event-timed, host included; host time alone), then the GPU time
    of the kernel as the plugin launches it (no s without a residual) and of the torch op, F.rms_norm
    and a copy of the kernel's bytes, all in CUDA graphs over rotated inputs (nothing from L2)."""
    nbytes = m * k * 2 * (4 if residual else 2)  # x read, y written (+ residual read, s written)
    n = max(2, min(32, math.ceil(2.2 * L2_BYTES / nbytes)))
    xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    rs = [torch.randn_like(xs[0]) for _ in range(n)] if residual else [None] * n
    w = torch.randn(k, device="cuda", dtype=torch.bfloat16)
    ys = [torch.empty_like(xs[0]) for _ in range(n)]
    ss = [torch.empty_like(xs[0]) for _ in range(n)] if residual else [None] * n
    op = lambda i: mcuda.rms_norm_cuda(xs[i % n], w, rs[i % n], None, k, 1e-6, 0, "", "bench")  # noqa: E731
    call = timed(lambda: op(0))
    host = _host_us(lambda: op(0))
    kern = time_graph(lambda i: mcuda.launch_rms_norm(xs[i % n], w, rs[i % n], None, ys[i % n], ss[i % n], 1e-6, 0))
    opg = time_graph(op)
    if residual:
        ref = time_graph(lambda i: F.rms_norm(xs[i % n] + rs[i % n], (k,), w, 1e-6))
    else:
        ref = time_graph(lambda i: F.rms_norm(xs[i % n], (k,), w, 1e-6))
    src = [torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8) for _ in range(n)]
    dst = [torch.empty_like(src[0]) for _ in range(n)]
    copy = time_graph(lambda i: dst[i % n].copy_(src[i % n]))  # reads and writes nbytes in all
    bw, copy_bw = nbytes / kern / 1e9, nbytes / copy / 1e9
    return (f"| {m} | {k} | {'yes' if residual else 'no'} | {call:.1f} | {host:.1f} | {opg * 1e6:.1f} | "
            f"{kern * 1e6:.1f} | {ref * 1e6:.1f} | {ref / kern:.2f} | {copy * 1e6:.1f} | {bw:.0f} | {copy_bw:.0f} | "
            f"{100 * bw / copy_bw:.0f}% |")


def bench_norms(lines: list[str]) -> None:
    lines += ["## RMSNorm (bf16, eps 1e-6)", "",
              "'op call': one call of the torch op (metrale_export.ops.cuda.rms_norm_cuda) between two CUDA "
              "events, host time included; 'host': its host time a call; 'op GPU', 'kernel', 'F.rms_norm', "
              "'copy': GPU time in CUDA graphs over inputs rotated past the L2 (kernel: the launch the "
              "plugin makes, no s without a residual; the op also writes s = x there). Bytes: x read, y "
              "written, with a residual also residual read and s written; '% of copy' is the kernel's "
              "bytes a second over a copy's of the same bytes.", "",
              "| M | K | residual | op call us | host us | op GPU us | kernel us | F.rms_norm us | torch / kernel | "
              "copy us | kernel GB/s | copy GB/s | % of copy |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m, k in NORM_SHAPES:
        for residual in (False, True):
            lines.append(_norm_row(m, k, residual))
            print(lines[-1], flush=True)
        torch.cuda.empty_cache()


def bench_float_proj(lines: list[str]) -> None:
    lines += ["", "## FloatProj (bf16 x, bf16 weights) vs cuBLAS bf16 (torch.mm)", "",
              "| shape | M | ours us | cuBLAS us | ours / cuBLAS | ours TF/s |", "|---|---|---|---|---|---|"]
    for label, (n, k) in PROJ_SHAPES.items():
        w = (torch.randn(n, k, device="cuda") * 0.05).to(torch.bfloat16)
        for m in PROJ_M:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ours = timed(lambda: mcuda.float_proj_cuda(x, w, None, n, k, "head", "bench"))
            ref = timed(lambda: torch.mm(x, w.T))
            lines.append(f"| {label} | {m} | {ours:.1f} | {ref:.1f} | {ours / ref:.2f} | {2 * m * n * k / ours / 1e6:.1f} |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path("."))
    args = p.parse_args(argv)
    commit = _commit()[:7]
    lines = [f"# Non-projection kernels, {torch.cuda.get_device_name()} ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"commit {commit or 'unknown'}, torch {torch.__version__})", "",
             "The anchors in the same run. RMSNorm: see the table's note. FloatProj: median of 30 CUDA-event "
             "timings of one call after 5 warm-ups (host time included).", ""]
    bench_norms(lines)
    bench_float_proj(lines)
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"invariance-{time.strftime('%Y%m%d-%H%M')}-{commit or 'unknown'}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
