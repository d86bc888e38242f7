"""W4A16 wgmma-tier variants side by side, with the anchors in the same run (one GPU):

    python -m benchmarks.bench_w4a16_variants [--out DIR] [--m 1,16,64,256,1024,4096]
        [--variants default,deep,t64,t128,base]

Per shape of benchmarks/bench_kernels.py and M: the median time of metrale_w4a16_proj (group 128)
under each value of METRALE_W4A16_WG (default: unset; deep, t64, t128, base: projWgmma.cuh's
wgDeepVariant / wgDeepMainloop; read by the launcher at each call, so at each graph capture), bf16
cuBLAS and tinygemm (M < TINYGEMM_MAX_M), timed as bench_kernels times them (CUDA graphs, weights
rotated past the L2; each variant twice, in two passes over the variants, its smaller time kept, as
bench_w8a8_variants), each variant's ratio to the best anchor and whether its output bits equal the
first variant's. Writes w4a16-variants-YYYYMMDD-HHMM-<commit>.md into --out (default $OUT).
"""

from __future__ import annotations

import math
import os

import torch

from metrale_export.ops import cuda as mcuda
from metrale_export.ops import w4a16

from .bench_kernels import TINYGEMM_MAX_M, _copies, time_graph
from .variants import geomean_lines
from .variants import main as variants_main

ENV = "METRALE_W4A16_WG"


def bench(shapes, m_values, variants, env: str = ENV, copy_tbs: float | None = None) -> list[str]:
    """The table (and the geometric means) of the variants of `env`; with copy_tbs, each variant's
    TB/s on the weight bytes and its fraction of that copy bandwidth as well."""
    dev = torch.device("cuda")
    per = " | {v} TB/s | {v} / copy" if copy_tbs else ""
    head = ["| shape | M | bf16 cuBLAS us | tinygemm us | "
            + " | ".join(f"{v} us | {v} / best" + per.format(v=v) for v in variants)
            + " | same bits |", "|---|---|---|---|" + ("---|---|" + ("---|---|" if copy_tbs else "")) * len(variants)
            + "---|"]
    rows, ratios = [], {v: {} for v in variants}
    for name, (n, k) in shapes.items():
        g = torch.Generator().manual_seed(n * 31 + k)  # bench_kernels._weights' weight, W4A16 only
        w = (torch.randn(n, k, generator=g) * 0.02).to(torch.bfloat16).float()
        wb = w.to(torch.bfloat16)
        c_bf16 = [wb.to(dev) if i == 0 else wb.to(dev).clone() for i in range(_copies(n * k * 2))]
        q4 = w4a16.quantize(w, 128, True, search=False)
        bytes_w4 = q4.weight.numel() + q4.weight_scale.numel() * q4.weight_scale.element_size()
        c_w4 = [(q4.weight.to(dev).clone(), q4.weight_scale.to(dev).clone()) for _ in range(_copies(bytes_w4))]

        def launch(x, c, y, n=n, k=k):
            mcuda.launch_w4a16(x, c[0], c[1], None, None, y, n, k, 128)
        tiny = None
        try:
            codes = torch.stack((q4.weight.view(torch.uint8) & 0xF, q4.weight.view(torch.uint8) >> 4), -1)
            packed = ((codes.reshape(n, k)[:, ::2] << 4) | codes.reshape(n, k)[:, 1::2]).to(torch.uint8).to(dev)
            wp = torch._convert_weight_to_int4pack(packed, 8)
            sz = torch.stack((q4.weight_scale.t(), torch.zeros_like(q4.weight_scale.t())), -1)
            tiny = [wp if i == 0 else wp.clone() for i in range(_copies(n * k // 2))], sz.to(torch.bfloat16).contiguous().to(dev)
        except Exception as exc:  # tinygemm's packing API differs between torch releases
            print(f"  tinygemm anchor unavailable: {type(exc).__name__}: {exc}")
        for m in m_values:
            x = (torch.randn(m, k, device=dev) * 0.5).to(torch.bfloat16)
            y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
            t_bf16 = time_graph(lambda i: torch.matmul(x, c_bf16[i % len(c_bf16)].t(), out=y))
            t_tiny = math.inf
            if tiny is not None and m < TINYGEMM_MAX_M:
                try:
                    t_tiny = time_graph(lambda i: torch._weight_int4pack_mm(x, tiny[0][i % len(tiny[0])], 128, tiny[1]))
                except Exception as exc:  # noqa: BLE001 - as bench_kernels: the anchor is optional
                    print(f"  tinygemm at M={m} unavailable: {type(exc).__name__}: {exc}"[:200])
            best = min(t_bf16, t_tiny)
            cells, outs = [], []

            def select(v):
                if v == "default":  # the launcher's own choice: the variable unset
                    os.environ.pop(env, None)
                else:
                    os.environ[env] = v
            # Two passes over the variants, each variant's time the smaller of its two (the first variant
            # after the anchor measured up to 16% slow: bench_w8a8_variants).
            times = {}
            for _ in range(2):
                for v in variants:
                    select(v)
                    t = time_graph(lambda i: launch(x, c_w4[i % len(c_w4)], y))
                    times[v] = min(t, times.get(v, t))
            for v in variants:
                select(v)
                t = times[v]
                yv = torch.full_like(y, float("nan"))
                launch(x, c_w4[0], yv)
                torch.cuda.synchronize()
                outs.append(yv.view(torch.int16))
                ratios[v].setdefault(m, []).append(t / best)
                cells.append(f"{t * 1e6:.1f} | {t / best:.2f}"
                             + (f" | {bytes_w4 / t / 1e12:.2f} | {bytes_w4 / t / 1e12 / copy_tbs:.2f}" if copy_tbs else ""))
            same = all(torch.equal(outs[0], o) for o in outs[1:])
            tiny_cell = f"{t_tiny * 1e6:.1f}" if math.isfinite(t_tiny) else "-"
            line = f"| {name} | {m} | {t_bf16 * 1e6:.1f} | {tiny_cell} | " + " | ".join(cells) + f" | {same} |"
            print(line, flush=True)
            rows.append(line)
        del c_bf16, c_w4, tiny
        torch.cuda.empty_cache()
    return head + rows + geomean_lines(ratios, "min(bf16 cuBLAS, tinygemm)")


def main(argv=None) -> int:
    return variants_main(argv, doc=__doc__, title="W4A16 mainloop variants", stem="w4a16-variants", env=ENV,
                         variants="default,deep,t64,t128", bench=bench)


if __name__ == "__main__":
    raise SystemExit(main())
