"""The shared frame of the kernel-variant benchmarks (bench_w4a16_variants, bench_w8a8_variants): one
op's variants, selected by an environment variable that the launcher reads at each call, timed side by
side with their anchors in one run. Here: the command line, the closing geometric-mean table and the
Markdown file; each benchmark brings its own ``bench(shapes, m_values, variants) -> lines``.
"""

from __future__ import annotations

import datetime as dt
import math
import os

import torch

from .bench_kernels import SHAPES, _commit, bench_parser, copy_bandwidth, require_cuda, write_markdown


def geomean_lines(ratios: dict, anchor: str) -> list[str]:
    """Per variant and M: the geometric mean over the shapes of ours / anchor (ratios[v][m] lists)."""
    ms = sorted({m for r in ratios.values() for m in r})
    geo = ["", f"Geometric mean over the shapes of ours / {anchor}:", "",
           "| variant | " + " | ".join(f"M={m}" for m in ms) + " |", "|---|" + "---|" * len(ms)]
    for v, r in ratios.items():
        geo.append(f"| {v} | " + " | ".join(f"{math.exp(sum(map(math.log, r[m])) / len(r[m])):.2f}" for m in ms) + " |")
    print("\n".join(geo))
    return geo


def main(argv, *, doc: str, title: str, stem: str, env: str, variants: str, bench, note: str = "") -> int:
    """The command line of a variants benchmark: --out, --m, --variants, --shapes; prints the tables and
    writes <stem>-YYYYMMDD-HHMM-<commit>.md into --out (default $OUT or benchmarks/results)."""
    ap = bench_parser(doc)
    ap.add_argument("--m", default="1,16,64,256,1024,4096")
    ap.add_argument("--variants", default=variants)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args(argv)
    require_cuda(f"bench_{stem.replace('-', '_')}")
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True
    props = torch.cuda.get_device_properties(0)
    copy_tbs = copy_bandwidth()
    shapes = {s: SHAPES[s] for s in args.shapes.split(",")}
    stamp = dt.datetime.now(dt.timezone.utc)
    intro = [f"# {title} ({env}), {stamp:%Y-%m-%d %H:%M} UTC, commit {_commit()}", "",
             f"{props.name}; torch {torch.__version__}; copy {copy_tbs:.2f} TB/s; times in us (median of graph "
             f"replays, weights rotated past the L2, as benchmarks/bench_kernels.py){note}.", ""]
    print("\n".join(intro), flush=True)
    try:
        lines = bench(shapes, [int(m) for m in args.m.split(",")], args.variants.split(","))
    finally:
        os.environ.pop(env, None)
    write_markdown(args.out, stem, f"{stamp:%Y%m%d-%H%M}", intro + lines)
    return 0
