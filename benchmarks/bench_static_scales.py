"""Decode time of static against dynamic activation scales, W8A8 and W4A4, in the same run.

Run on a CUDA machine with the kernel library built (``make plugins``):

    python -m benchmarks.bench_static_scales [--out DIR] [--shapes 8B-up,8B-down,8B-qkv]

Per shape (Qwen3-8B up/down/qkv by default) and M = 1..16: the median time of one projection
launch (quantization pre-pass included) with dynamic per-row scales (W8A8 ``row``: the amax
pre-pass; W4A4 without ``input_scale``: the per-row global scale) and with a static scale (W8A8
``tensor``, W4A4 with ``input_scale``: no amax), and the time saved per projection (us and %).
Same method as benchmarks/bench_kernels.py (``time_graph``: CUDA graphs over weight copies beyond
the L2, CUDA events, median of replays). Writes a table to stdout and ``static-scales-<date>.md`` /
``.json`` into ``--out`` (default ``$OUT`` or benchmarks/results).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
from pathlib import Path

import torch

from benchmarks.bench_kernels import SHAPES, _copies, _weights, time_graph
from metrale_export.ops import cuda as mcuda

M_VALUES = tuple(range(1, 17))
DEFAULT_SHAPES = ("8B-up", "8B-down", "8B-qkv")


def bench_shape(name: str, n: int, k: int, rows: list) -> None:
    dev = torch.device("cuda")
    _, _, q8, qf = _weights(n, k, dev)
    bytes_w8 = q8.weight.numel() + q8.weight_scale.numel() * 4
    bytes_f4 = qf.weight.numel() + qf.weight_scale.numel() + 4

    def rep(t: torch.Tensor, nbytes: int):
        return [t.to(dev) if i == 0 else t.to(dev).clone() for i in range(_copies(nbytes))]

    c_w8 = list(zip(rep(q8.weight, bytes_w8), rep(q8.weight_scale, bytes_w8)))
    c_f4 = list(zip(rep(qf.weight, bytes_f4), rep(qf.weight_scale, bytes_f4)))
    gw = qf.weight_global_scale.to(dev)
    for m in M_VALUES:
        x = (torch.randn(m, k, device=dev) * 0.5).to(torch.bfloat16)
        y = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        amax = x.float().abs().amax()
        sx = (amax / 448.0).reshape(1).float()
        ga = (amax / 2688.0).reshape(1).float()
        t = {
            "w8a8_dynamic": time_graph(lambda i: mcuda.launch_w8a8(
                x, c_w8[i % len(c_w8)][0], c_w8[i % len(c_w8)][1], None, y, n, k, "channel", "fp8", "row")),
            "w8a8_static": time_graph(lambda i: mcuda.launch_w8a8(
                x, c_w8[i % len(c_w8)][0], c_w8[i % len(c_w8)][1], None, y, n, k, "channel", "fp8", "tensor",
                input_scale=sx)),
            "w4a4_dynamic": time_graph(lambda i: mcuda.launch_w4a4(
                x, c_f4[i % len(c_f4)][0], c_f4[i % len(c_f4)][1], gw, None, None, y, n, k, "nvfp4")),
            "w4a4_static": time_graph(lambda i: mcuda.launch_w4a4(
                x, c_f4[i % len(c_f4)][0], c_f4[i % len(c_f4)][1], gw, ga, None, y, n, k, "nvfp4")),
        }
        row = dict(shape=name, n=n, k=k, m=m, **{key: v * 1e6 for key, v in t.items()})
        rows.append(row)
        print(_line(row), flush=True)


def _line(r: dict) -> str:
    cells = [r["shape"], str(r["m"])]
    for f in ("w8a8", "w4a4"):
        d, s = r[f"{f}_dynamic"], r[f"{f}_static"]
        cells += [f"{d:.2f}", f"{s:.2f}", f"{d - s:+.2f}", f"{100 * (d - s) / d:+.1f}%"]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| shape | M | W8A8 dynamic us | W8A8 static us | saved us | saved | "
          "W4A4 dynamic us | W4A4 static us | saved us | saved |\n|" + "---|" * 10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    args = ap.parse_args(argv)
    names = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in names if s not in SHAPES]
    if unknown:
        ap.error(f"--shapes: unknown {unknown}; known: {', '.join(SHAPES)}")
    print(torch.cuda.get_device_name(), flush=True)
    print(HEADER, flush=True)
    rows: list = []
    for name in names:
        bench_shape(name, *SHAPES[name], rows)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"static-scales-{stamp}.json").write_text(json.dumps(rows, indent=2) + "\n")
    text = [f"# Static vs dynamic activation scales, {torch.cuda.get_device_name()}, {stamp}", "",
            "One projection launch, quantization pre-pass included (benchmarks/bench_static_scales.py).", "",
            HEADER, *map(_line, rows), ""]
    for f in ("w8a8", "w4a4"):
        saved = [r[f"{f}_dynamic"] - r[f"{f}_static"] for r in rows]
        text.append(f"- {f}: mean saved {sum(saved) / len(saved):.2f} us a projection over M = 1..16")
    (out / f"static-scales-{stamp}.md").write_text("\n".join(text) + "\n")
    print("\n".join(text[-2:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
