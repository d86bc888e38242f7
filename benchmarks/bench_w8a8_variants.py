"""W8A8 multiply variants side by side, with the FP8 cuBLASLt anchor in the same run (one GPU):

    python -m benchmarks.bench_w8a8_variants [--out DIR] [--m 1,16,64,256,1024,4096] [--variants exact,wgmma]
        [--granularity channel|block]

Per shape of benchmarks/bench_kernels.py and M: the median time of metrale_w8a8_proj (FP8 per-channel
weights, per-row dynamic FP8 activations, the quantization included) under each value of
METRALE_W8A8_MMA (read by the launcher at each call, so at each graph capture; "wgmma": unset,
W8A8Proj version 3's default, the FP8 wgmma kernel; "exact": the retired versions' exact f16 path,
kept behind the variable for this comparison), and ``torch._scaled_mm`` FP8 with per-row scales
(cuBLASLt, the GEMM only), timed as bench_kernels times them (CUDA graphs, weights rotated past the
L2; each variant twice, in two passes over the variants, its smaller time kept); each variant's
TFLOP/s, TB/s on the weight bytes and ratio to the anchor, and whether its bits
equal the first variant's (exact and wgmma never share bits: a "True" between them would mean the
variant did not run). The launch variants of the FP8 kernel, named as METRALE_W8A8_MMA takes them
(wg-base: b94300f's; wg-q: the pre-pass fused with the operand layout; wg-qe: that and the
epilogue's scales read before its stores; each with CTAs of 128 weight rows at every M, where the
default has 64 at M <= 16), give the same bits: among them "same bits" must be True. ``--granularity block``: block128 weights and row_block128 activations (the official FP8
Qwen3 format; its FP8 kernel scales each block at its promotion) instead of channel x row, against
the same per-channel cuBLASLt anchor; ``wg-fma-probe`` there times the FFMA promotion, whose bits are
not the contract's (a measurement of what the promotion's FP32 issue costs). Writes
w8a8-variants-YYYYMMDD-HHMM-<commit>.md (w8a8-block-variants-... for block) into --out (default $OUT).
"""

from __future__ import annotations

import os

import torch

from metrale_export.ops import cuda as mcuda
from metrale_export.ops import w8a8

from .bench_kernels import _copies, time_graph
from .variants import geomean_lines
from .variants import main as variants_main


def channel_weight_copies(n: int, k: int, dev, granularity: str = "channel"):
    """bench_kernels._weights' [n, k] weight as a W8A8 weight of ``granularity`` (channel or
    block128), in enough device copies to rotate L2 (``_copies``): (codes, scales) pairs, the codes
    viewed as e4m3, and the anchor's per-channel scales as a row."""
    g = torch.Generator().manual_seed(n * 31 + k)
    w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16).float()
    q8 = w8a8.quantize(w, granularity)
    nbytes = q8.weight.numel() + q8.weight_scale.numel() * 4
    c_w8 = [(q8.weight.to(dev).clone(), q8.weight_scale.to(dev).clone()) for _ in range(_copies(nbytes))]
    # The anchor's per-channel scales: the weight's own (channel), else any positive row (block128).
    sw_row = (q8.weight_scale.to(dev).reshape(1, n) if granularity == "channel"
              else torch.rand(1, n, device=dev) + 0.5)
    return c_w8, [cw.view(torch.float8_e4m3fn) for cw, _ in c_w8], sw_row


# --granularity: (weight scale granularity, activation scale granularity) of our op
GRANULARITIES = {"channel": ("channel", "row"), "block": ("block128", "row_block128")}

ENV = "METRALE_W8A8_MMA"


def _select(variant: str) -> None:
    if variant == "wgmma":
        os.environ.pop(ENV, None)  # the default
    else:
        os.environ[ENV] = variant


def bench(shapes, m_values, variants, granularity: str = "channel") -> list[str]:
    dev = torch.device("cuda")
    wgran, agran = GRANULARITIES[granularity]
    head = ["| shape | M | fp8 cuBLASLt us | " + " | ".join(f"{v} us | {v} TF/s | {v} TB/s | {v} / cuBLASLt"
                                                           for v in variants) + " | same bits |",
            "|---|---|---|" + "---|---|---|---|" * len(variants) + "---|"]
    rows, ratios = [], {v: {} for v in variants}
    for name, (n, k) in shapes.items():
        c_w8, c_fp8, sw_row = channel_weight_copies(n, k, dev, wgran)
        nbytes = c_w8[0][0].numel() + c_w8[0][1].numel() * 4  # the weight's codes and scales
        for m in m_values:
            x = (torch.randn(m, k, device=dev) * 0.5).to(torch.bfloat16)
            y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
            flops = 2.0 * m * n * k
            mp = max(16, -(-m // 16) * 16)  # cuBLASLt needs M padded to 16
            xq = torch.randn(mp, k, device=dev).to(torch.float8_e4m3fn)
            sa = torch.rand(mp, 1, device=dev) + 0.5
            t_lt = time_graph(lambda i: torch._scaled_mm(xq, c_fp8[i % len(c_fp8)].t(), scale_a=sa, scale_b=sw_row,
                                                         out_dtype=torch.bfloat16))
            cells, outs = [], []
            # Two passes over the variants, each variant's time the smaller of its two: measured on the H200
            # (w8a8-variants-20261203-2058-1723d97.md against -2059-), whichever variant ran first after the
            # anchor was up to 16% slower at M >= 1024 (the same kernel in two positions).
            times = {}
            for _ in range(2):
                for v in variants:
                    _select(v)
                    t = time_graph(lambda i: mcuda.launch_w8a8(x, c_w8[i % len(c_w8)][0], c_w8[i % len(c_w8)][1],
                                                               None, y, n, k, wgran, "fp8", agran))
                    times[v] = min(t, times.get(v, t))
            for v in variants:
                _select(v)
                t = times[v]
                yv = torch.full_like(y, float("nan"))
                mcuda.launch_w8a8(x, c_w8[0][0], c_w8[0][1], None, yv, n, k, wgran, "fp8", agran)
                torch.cuda.synchronize()
                outs.append(yv.view(torch.int16))
                ratios[v].setdefault(m, []).append(t / t_lt)
                cells.append(f"{t * 1e6:.1f} | {flops / t / 1e12:.0f} | {nbytes / t / 1e12:.2f} | {t / t_lt:.2f}")
            same = all(torch.equal(outs[0], o) for o in outs[1:])
            line = f"| {name} | {m} | {t_lt * 1e6:.1f} | " + " | ".join(cells) + f" | {same} |"
            print(line, flush=True)
            rows.append(line)
        del c_w8, c_fp8
        torch.cuda.empty_cache()
    return head + rows + geomean_lines(ratios, "FP8 cuBLASLt")


def main(argv=None) -> int:
    import argparse
    import sys

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--granularity", choices=tuple(GRANULARITIES), default="channel")
    known, rest = pre.parse_known_args(sys.argv[1:] if argv is None else argv)
    wgran, agran = GRANULARITIES[known.granularity]
    block = known.granularity == "block"
    return variants_main(rest, doc=__doc__, title=f"W8A8 multiply variants ({wgran} x {agran})",
                         stem="w8a8-block-variants" if block else "w8a8-variants", env=ENV,
                         variants="exact,wgmma", bench=lambda s, m, v: bench(s, m, v, known.granularity),
                         note="; ours include the activation quantization, cuBLASLt (per-channel) is the GEMM alone")


if __name__ == "__main__":
    raise SystemExit(main())
