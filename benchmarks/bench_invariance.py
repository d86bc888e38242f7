"""Benchmark of the non-projection kernels on the GPU, with their anchors measured in the same run.

- RMSNorm (plugins/rmsNorm) vs ``torch.nn.functional.rms_norm``, and its bytes moved (x read, y
  written, plus the residual read and written) as a fraction of the copy bandwidth measured here
  (``torch.Tensor.copy_`` of the same bytes);
- FloatProj (plugins/floatProj) vs cuBLAS bf16 (``torch.mm``) at M in {1, 8, 16, 64, 256, 1024, 4096}
  on lm_head and 8B shapes.
Median of repeats (CUDA events), ratio columns; writes a markdown table to ``--out``.

    python -m benchmarks.bench_invariance --out $OUT
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F

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


def bench_norms(lines: list[str]) -> None:
    lines += ["## RMSNorm (bf16, eps 1e-6)", "",
              "| M | K | residual | ours us | F.rms_norm us | ours / torch | ours GB/s | copy GB/s | % of copy |",
              "|---|---|---|---|---|---|---|---|---|"]
    for m, k in NORM_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(k, device="cuda", dtype=torch.bfloat16)
        for residual in (False, True):
            r = torch.randn_like(x) if residual else None
            ours = timed(lambda: mcuda.rms_norm_cuda(x, w, r, None, k, 1e-6, 0, "", "bench"))
            if residual:
                ref = timed(lambda: F.rms_norm(x + r, (k,), w, 1e-6))
            else:
                ref = timed(lambda: F.rms_norm(x, (k,), w, 1e-6))
            nbytes = x.numel() * 2 * (4 if residual else 2)
            src = torch.empty(nbytes // 2, device="cuda", dtype=torch.uint8)
            dst = torch.empty_like(src)
            copy = timed(lambda: dst.copy_(src))  # reads and writes nbytes in all
            ours_bw, copy_bw = nbytes / ours / 1e3, nbytes / copy / 1e3
            lines.append(f"| {m} | {k} | {'yes' if residual else 'no'} | {ours:.1f} | {ref:.1f} | {ours / ref:.2f} | "
                         f"{ours_bw:.0f} | {copy_bw:.0f} | {100 * ours_bw / copy_bw:.0f}% |")


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
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    lines = [f"# Non-projection kernels, {torch.cuda.get_device_name()} ({time.strftime('%Y-%m-%d %H:%M')}, "
             f"commit {commit or 'unknown'}, torch {torch.__version__})", "",
             "Median of 30 CUDA-event timings after 5 warm-ups; the anchors in the same run.", ""]
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
