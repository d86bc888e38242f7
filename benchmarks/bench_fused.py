"""Decode time of a whole layer's projections, fused (issue 20) vs unfused, on one GPU.

Run on a CUDA machine with the kernel library built (``make plugins``):

    python -m benchmarks.bench_fused [OUTDIR] [--out DIR] [--layers 8B,32B] [--formats ...] [--m 1,2,4,8,16]

Per Qwen3 layer (8B: hidden 4096, q 32 x 128, kv 8 x 128, intermediate 12288; 32B: hidden 5120, q 64 x
128, kv 8 x 128, intermediate 25600), format (W4A16 group 128 with zero points; W8A8 channel weights,
row fp8 activations; W4A4 nvfp4) and M in {1, 2, 4, 8, 16}: the time of the layer's projections as
one CUDA graph replay of the op calls, unfused (q, k, v, o, gate, up, down: 7 launches) and fused
(qkv, o, gate_up, down: 4), the memory bound (the layer's weight bytes, codes + scales + zero points,
over the device-to-device copy bandwidth measured in the same run, bench_kernels.copy_bandwidth) and
each one's fraction of it. The split of the fused outputs is ONNX data movement and is not timed;
neither is attention nor anything between the projections (their inputs are random tensors).

Method (bench_kernels'): one layer's calls are captured ``REPS`` times into a CUDA graph, rotating
over copies of the layer's weights whose total exceeds twice the 60 MB L2, the replays timed with
CUDA events, the median replay over ``REPLAYS``; unfused and fused alternate ``ROUNDS`` times and the
median round is reported. The unfused ops read row slices of the fused weights (the same bytes: W4A16
and W8A8 quantize row by row, so the concatenation's codes are the parts', tests/ops/
test_fused_quant.py). The operands are random codes and valid scales made on the GPU (the kernels'
time does not depend on which codes a quantizer would pick; quantizing a 32B layer on the CPU takes
minutes). Prints a table per format and writes ``fused-YYYYMMDD-HHMM-<commit>.md`` and ``.json``
(the record) into OUTDIR (default ``--out``: ``$OUT`` or benchmarks/results).
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from pathlib import Path

import torch

from benchmarks.bench_kernels import (REPLAYS, REPS, _commit, _copies, bench_parser, copy_bandwidth,
                                      require_cuda, time_graph, write_markdown)
from metrale_export.ops import cuda as mcuda

LAYERS = {
    "8B": dict(hidden=4096, q=32 * 128, kv=8 * 128, intermediate=12288),
    "32B": dict(hidden=5120, q=64 * 128, kv=8 * 128, intermediate=25600),
}
FORMATS = ("w4a16", "w8a8", "w4a4")
FORMAT_NAMES = {"w4a16": "W4A16 (group 128, zero points)", "w8a8": "W8A8 (channel weights, row fp8 activations)",
                "w4a4": "W4A4 (nvfp4)"}
M_VALUES = (1, 2, 4, 8, 16)
ROUNDS = 3
GROUP = 128
DEV = torch.device("cuda")


def projections(layer: dict) -> dict:
    """The fused layer's projections, name -> (N, K, input, the parts' N) (input: which activation)."""
    h, q, kv, i = layer["hidden"], layer["q"], layer["kv"], layer["intermediate"]
    return {"qkv": (q + 2 * kv, h, "x", (q, kv, kv)), "o": (h, q, "attn", (h,)),
            "gate_up": (2 * i, h, "x", (i, i)), "down": (h, i, "mlp", (h,))}


UNFUSED_NAMES = {"qkv": ("q", "k", "v"), "o": ("o",), "gate_up": ("gate", "up"), "down": ("down",)}


def operands(fmt: str, n: int, k: int, gen: torch.Generator) -> dict:
    """Random quantized operands of an [n, k] weight on the GPU, the dtypes and shapes of docs/ops.md."""
    dev = DEV
    if fmt == "w4a16":
        g = -(-k // GROUP)
        return dict(weight=torch.randint(-128, 128, (n, k // 2), generator=gen, device=dev, dtype=torch.int8),
                    weight_scale=(torch.rand(n, g, generator=gen, device=dev) * 0.01 + 1e-3).to(torch.bfloat16),
                    zero_point=torch.randint(0, 16, (n, g), generator=gen, device=dev, dtype=torch.int8))
    if fmt == "w8a8":
        codes = torch.randn(n, k, generator=gen, device=dev).mul_(64).to(torch.float8_e4m3fn).view(torch.int8)
        return dict(weight=codes, weight_scale=torch.rand(n, generator=gen, device=dev) * 1e-4 + 1e-5)
    scales = (torch.rand(n, k // 16, generator=gen, device=dev) * 64 + 16).to(torch.float8_e4m3fn)
    return dict(weight=torch.randint(-128, 128, (n, k // 2), generator=gen, device=dev, dtype=torch.int8),
                weight_scale=scales.view(torch.int8),
                weight_global_scale=torch.full((1,), 1e-4, device=dev))


def nbytes(ops: dict) -> int:
    return sum(t.numel() * t.element_size() for t in ops.values())


def rows_of(ops: dict, r0: int, n: int) -> dict:
    """The operands of rows r0..r0+n (contiguous views; the per-tensor global scale is shared)."""
    return {key: (t if key == "weight_global_scale" else t[r0:r0 + n]) for key, t in ops.items()}


def launch(fmt: str, ops: dict, x: torch.Tensor, y: torch.Tensor, n: int, k: int) -> None:
    if fmt == "w4a16":
        mcuda.launch_w4a16(x, ops["weight"], ops["weight_scale"], ops["zero_point"], None, y, n, k, GROUP)
    elif fmt == "w8a8":
        mcuda.launch_w8a8(x, ops["weight"], ops["weight_scale"], None, y, n, k, "channel", "fp8", "row")
    else:
        mcuda.launch_w4a4(x, ops["weight"], ops["weight_scale"], ops["weight_global_scale"], None, None, y, n, k,
                          "nvfp4")


def layer_weights(fmt: str, layer: dict) -> tuple[list, int]:
    """Copies of the fused layer's operands (name -> operands), together over twice the L2, and one
    copy's bytes."""
    gen = torch.Generator(device=DEV).manual_seed(FORMATS.index(fmt) * 7919 + layer["hidden"])
    first = {name: operands(fmt, n, k, gen) for name, (n, k, _, _) in projections(layer).items()}
    size = sum(nbytes(o) for o in first.values())
    out = [first] + [{name: {key: t.clone() for key, t in o.items()} for name, o in first.items()}
                     for _ in range(_copies(size) - 1)]
    return out, size


def layer_calls(fmt: str, layer: dict, weights: list, m: int, fused: bool):
    """calls(i): one layer's projections at m rows on weight copy i % len(weights)."""
    dev, procs = DEV, projections(layer)
    acts = {"x": layer["hidden"], "attn": layer["q"], "mlp": layer["intermediate"]}
    xs = {key: (torch.randn(m, k, device=dev) * 0.5).to(torch.bfloat16) for key, k in acts.items()}
    plan = []  # (name, r0, n, k, input, output)
    for name, (n, k, src, parts) in procs.items():
        pieces = [(name, 0, n)] if fused else [(name, sum(parts[:j]), parts[j]) for j in range(len(parts))]
        for p_name, r0, pn in pieces:
            plan.append((p_name, r0, pn, k, xs[src], torch.empty(m, pn, dtype=torch.bfloat16, device=dev)))
    views = [[rows_of(w[p_name], r0, pn) for p_name, r0, pn, _, _, _ in plan] for w in weights]

    def calls(i: int) -> None:
        for (_, _, pn, k, x, y), ops in zip(plan, views[i % len(views)]):
            launch(fmt, ops, x, y, pn, k)
    return calls, len(plan)


def bench_layer(fmt: str, name: str, m_values, copy_tbs: float, rows: list) -> None:
    layer = LAYERS[name]
    weights, size = layer_weights(fmt, layer)
    bound_us = size / (copy_tbs * 1e12) * 1e6
    for m in m_values:
        unfused, n_unfused = layer_calls(fmt, layer, weights, m, fused=False)
        fused, n_fused = layer_calls(fmt, layer, weights, m, fused=True)
        t_u, t_f = [], []
        for _ in range(ROUNDS):
            t_u.append(time_graph(unfused) * 1e6)
            t_f.append(time_graph(fused) * 1e6)
        u, f = statistics.median(t_u), statistics.median(t_f)
        row = dict(format=fmt, layer=name, m=m, unfused_us=u, fused_us=f, unfused_launches=n_unfused,
                   fused_launches=n_fused, weight_bytes=size, bound_us=bound_us, rounds_unfused_us=t_u,
                   rounds_fused_us=t_f)
        rows.append(row)
        print(table_row(row), flush=True)
    del weights
    torch.cuda.empty_cache()


HEADER = ["| layer | M | unfused us | fused us | fused/unfused | bound us | unfused of bound | fused of bound |",
          "|---|---|---|---|---|---|---|---|"]


def table_row(r: dict) -> str:
    u, f, b = r["unfused_us"], r["fused_us"], r["bound_us"]
    return (f"| {r['layer']} | {r['m']} | {u:.1f} | {f:.1f} | {f / u:.3f} | {b:.1f} | {b / u:.2f} | "
            f"{b / f:.2f} |")


def render(result: dict) -> list[str]:
    """The Markdown of a results record: a table per format."""
    lines = [f"# Fused vs unfused projections, a decode layer, {result['date']}, commit {result['commit']}", "",
             f"{result['device']}; torch {result['torch']}; copy {result['copy_tbs']:.2f} TB/s (read + write). "
             f"Times in us: one layer's projections (unfused: q, k, v, o, gate, up, down; fused: qkv, o, "
             f"gate_up, down), median of {result['rounds']} rounds of the median of {result['replays']} graph "
             f"replays of {result['reps']} layers (benchmarks/bench_fused.py). Bound: the layer's weight bytes / "
             f"the copy bandwidth; 'of bound': bound / time.", ""]
    for fmt in FORMATS:
        rs = [r for r in result["rows"] if r["format"] == fmt]
        if rs:
            lines += [f"## {FORMAT_NAMES[fmt]}", "", *HEADER, *map(table_row, rs), ""]
    return lines


def parse_args(argv):
    ap = bench_parser(__doc__)
    ap.add_argument("outdir", nargs="?", help="where the results go (overrides --out)")
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--m", default=",".join(map(str, M_VALUES)))
    args = ap.parse_args(argv)
    args.layers, args.formats = args.layers.split(","), args.formats.split(",")
    bad = [x for x in args.layers if x not in LAYERS] + [x for x in args.formats if x not in FORMATS]
    if bad:
        ap.error(f"unknown {bad}; layers {list(LAYERS)}, formats {list(FORMATS)}")
    args.m = [int(v) for v in args.m.split(",")]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    require_cuda("bench_fused")
    props = torch.cuda.get_device_properties(0)
    copy_tbs = copy_bandwidth()
    print(f"{props.name}; copy {copy_tbs:.2f} TB/s; times in us (median of {ROUNDS} rounds)", flush=True)
    rows: list = []
    for fmt in args.formats:
        print(f"\n{FORMAT_NAMES[fmt]}\n" + "\n".join(HEADER), flush=True)
        for name in args.layers:
            bench_layer(fmt, name, args.m, copy_tbs, rows)
    stamp = dt.datetime.now(dt.timezone.utc)
    result = dict(date=stamp.isoformat(timespec="seconds"), commit=_commit(), device=props.name,
                  torch=torch.__version__, copy_tbs=copy_tbs, reps=REPS, replays=REPLAYS, rounds=ROUNDS, rows=rows)
    md = write_markdown(args.outdir or args.out, "fused", f"{stamp:%Y%m%d-%H%M}", render(result))
    md.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {md.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
