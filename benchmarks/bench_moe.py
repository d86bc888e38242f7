"""Benchmark of the grouped-expert kernels (plugins/moeProj/) on one GPU, with the anchors measured
in the same run.

    python -m benchmarks.bench_moe [--out DIR] [--quick]

Shapes: Qwen3-30B-A3B's experts (hidden 2048, moe_intermediate 768, 128 experts, top-8) and
Qwen3-Next-80B-A3B's (hidden 2048, 512 wide, 512 experts, top-10). Routing: uniform random and Zipf
(s = 1.2) top-k, a fresh routing per call. Formats: W4A16 (group 128, bf16 activations), W8A8 (FP8
per-channel weights, per-row FP8 activations), W4A4 (NVFP4, dynamic per-row). One "call" is the
routed experts of one layer: gate, up (combine=0) and down with the combine (the SwiGLU product
between them is not timed).

Columns: median time (CUDA graph of REPS calls, rotating routings, median of the replays); the
bytes of the distinct experts the call touches (codes + scales of gate, up and down) over the
device-to-device copy bandwidth measured in this run (the decode target: time <= 1.25x that);
at M = 4096 a bf16 grouped GEMM anchor over the same sorted tokens (``torch._grouped_mm`` where
this torch has it, else one cuBLAS bf16 GEMM per expert); and today's dense export (every expert
on every row: 3 E dense projections at M rows), estimated as E x the measured dense kernels of one
expert's gate, up and down at M rows (same format; it does not depend on the routing). The path
column: ``slots`` (m * top_k <= 64: one launch over (n tile, slot) reading topk_ids, no routing) or
``sorted`` (routing, gather, grouped tiles, scatter/combine); at M = 16 and 64 the slot path
(``METRALE_MOE_SLOT_MAX``) and the sorted path on 16-row instead of 8-row streaming tiles
(``sorted16``, ``METRALE_MOE_STREAM8_MAX=8``, the bound before 2026-12-01 12:10) are also timed
(uniform routing), to show where the bounds belong. ``--fused``: W4A16 decode only, each routing on the
default path and on the fused paths of moeProj/moeFusedKernel.cuh in the same run (``fused``,
``METRALE_MOE_FUSED=1``: one launch per op, the combine a second launch; ``fused2``, ``=2``: the
combine folded into the down launch). ``--prefill``: W4A16 and W4A4 at M = 1024 and 4096 only, uniform and Zipf
routing, the default (the wgmma tier, moeWgmmaKernel) beside ``smem`` (``METRALE_MOE_WGMMA=0``: the
shared-memory tier before it) and ``wg64`` / ``wg128`` (its token tile forced), each with the anchor.
``--fp8``: W8A8 (channel x row) and ``w8a8blk`` (block128 weights x row_block128 activations, the official
FP8 Qwen3 checkpoints' form) at M = 1, 16, 64 and 4096, each routing on the default (version 2's exact f16
products) and on the FP8 wgmma tier (``fp8``, ``METRALE_MOE_FP8=1``, moeProj/moeFp8Kernel.cuh). Writes
``moe-YYYYMMDD-HHMM-<commit>.md`` / ``.json`` into ``--out`` (default $OUT or benchmarks/results).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
from pathlib import Path

import torch

from benchmarks.bench_kernels import copy_bandwidth, time_graph
from metrale_export.ops import cuda as mcuda  # noqa: F401  (registers the CUDA kernels)

SHAPES = {"30B-A3B": (2048, 768, 128, 8), "Next-80B-A3B": (2048, 512, 512, 10)}
FORMATS = ("w4a16", "w8a8", "w4a4")
M_DECODE = (1, 4, 16, 64)
M_PREFILL = 4096
REPS = 10
ROUTINGS = ("uniform", "zipf")
SLOT_MAX = 64  # moeProjKernel.cuh's kMOE_SLOT_MAX
M_BOTH_PATHS = (16, 64)


def routing(m: int, e: int, k: int, kind: str, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    if kind == "uniform":
        p = torch.ones(e, device="cuda")
    else:
        p = 1.0 / torch.arange(1, e + 1, device="cuda", dtype=torch.float32) ** 1.2
        p = p[torch.randperm(e, device="cuda", generator=g)]
    ids = torch.multinomial(p.expand(m, e), k, replacement=False, generator=g).to(torch.int32)
    w = torch.rand(m, k, device="cuda", generator=g).to(torch.bfloat16)
    return ids.contiguous(), w


class Proj:
    """One projection of all experts, random codes and scales in the format's layout."""

    def __init__(self, fmt: str, e: int, n: int, k: int, seed: int):
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.fmt, self.e, self.n, self.k = fmt, e, n, k

        def rbytes(*shape, lo=0, hi=256):
            return torch.randint(lo, hi, shape, device="cuda", generator=g, dtype=torch.int32).to(torch.uint8).view(torch.int8)

        if fmt == "w4a16":
            self.t = dict(weight=rbytes(e, n, k // 2),
                          weight_scale=(torch.rand(e, n, k // 128, device="cuda", generator=g) * 0.01 + 1e-3)
                          .to(torch.bfloat16))  # op version 2: bf16 group scales
        elif fmt in ("w8a8", "w8a8blk"):
            codes = rbytes(e, n, k, hi=0x7E).view(torch.uint8) | (rbytes(e, n, k, hi=2).view(torch.uint8) << 7)
            # w8a8blk: the official FP8 Qwen3 checkpoints' form, 128x128 weight blocks, (row, 128) activations
            sshape = (e, n) if fmt == "w8a8" else (e, (n + 127) // 128, (k + 127) // 128)
            self.t = dict(weight=codes.view(torch.int8),
                          weight_scale=torch.rand(*sshape, device="cuda", generator=g) * 0.01 + 1e-3)
        else:
            self.t = dict(weight=rbytes(e, n, k // 2), weight_scale=rbytes(e, n, k // 16, lo=0x28, hi=0x48),
                          weight_global_scale=torch.full((e,), 0.01, device="cuda"))
        self.expert_bytes = sum(t.numel() * t.element_size() for t in self.t.values()) // e

    def grouped(self, x, ids, w=None):
        t, n, k, e = self.t, self.n, self.k, self.e
        top_k, comb = ids.shape[1], int(w is not None)
        if self.fmt == "w4a16":
            return torch.ops.metrale.w4a16_moe_proj(x, ids, w, t["weight"], t["weight_scale"], None, None, n, k, e,
                                                    top_k, comb, 128, "bf16", "moe", "b")
        if self.fmt in ("w8a8", "w8a8blk"):
            gran, agran = ("channel", "row") if self.fmt == "w8a8" else ("block128", "row_block128")
            return torch.ops.metrale.w8a8_moe_proj(x, ids, w, t["weight"], t["weight_scale"], None, None, n, k, e, top_k,
                                                   comb, gran, "fp8", agran, "moe", "b")
        return torch.ops.metrale.w4a4_moe_proj(x, ids, w, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                               None, None, n, k, e, top_k, comb, "nvfp4", "moe", "b")

    def dense(self, x, y, expert: int):
        """The dense kernel of one expert (today's export runs E of these per projection)."""
        t, n, k = self.t, self.n, self.k
        if self.fmt == "w4a16":
            return mcuda.launch_w4a16(x, t["weight"][expert], t["weight_scale"][expert], None, None, y, n, k, 128)
        if self.fmt in ("w8a8", "w8a8blk"):
            gran, agran = ("channel", "row") if self.fmt == "w8a8" else ("block128", "row_block128")
            return mcuda.launch_w8a8(x, t["weight"][expert], t["weight_scale"][expert], None, y, n, k, gran,
                                     "fp8", agran)
        return mcuda.launch_w4a4(x, t["weight"][expert], t["weight_scale"][expert],
                                 t["weight_global_scale"][expert:expert + 1], None, None, y, n, k, "nvfp4")


def grouped_mm_anchor(x, ids, wb: list[torch.Tensor], e: int):
    """bf16 grouped GEMM over the tokens sorted by expert: gate, up, down (the same three GEMMs)."""
    m, top_k = ids.shape
    flat = ids.reshape(-1).to(torch.int64)
    order = torch.argsort(flat, stable=True)
    xs = x[order // top_k].contiguous()
    counts = torch.bincount(flat, minlength=e)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    act = torch.empty(xs.shape[0], wb[2].shape[2], dtype=torch.bfloat16, device="cuda")
    grouped = hasattr(torch, "_grouped_mm")
    if grouped:
        try:
            torch._grouped_mm(xs, wb[0].transpose(-2, -1), offs=offs)
        except (RuntimeError, TypeError) as exc:
            print(f"torch._grouped_mm unusable here ({exc}); per-expert cuBLAS instead", flush=True)
            grouped = False
    if grouped:
        def run(i):
            torch._grouped_mm(xs, wb[0].transpose(-2, -1), offs=offs)
            torch._grouped_mm(xs, wb[1].transpose(-2, -1), offs=offs)
            torch._grouped_mm(act, wb[2].transpose(-2, -1), offs=offs)
        name = "torch._grouped_mm bf16"
    else:
        bounds = [0] + offs.tolist()

        def run(i):
            for j in range(e):
                lo, hi = bounds[j], bounds[j + 1]
                if hi > lo:
                    xs[lo:hi] @ wb[0][j].T
                    xs[lo:hi] @ wb[1][j].T
                    act[lo:hi] @ wb[2][j].T
        name = "per-expert cuBLAS bf16"
    return time_graph(run, reps=3, replays=5), name


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--fused", action="store_true", help="W4A16 decode: the default path beside the fused one")
    ap.add_argument("--prefill", action="store_true", help="W4A16 / W4A4 prefill: the wgmma tier beside the shared-memory one")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="a comma list of SHAPES' names")
    ap.add_argument("--variants", default="",
                    help="--prefill: a comma list of the variants to time (default, smem, wg64, wg128; all unless given)")
    ap.add_argument("--fp8", action="store_true",
                    help="W8A8 at M = 1..4096: version 2's exact path beside the FP8 wgmma tier (METRALE_MOE_FP8=1)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bw = copy_bandwidth()
    wgmma = torch.cuda.get_device_capability() == (9, 0)  # the grouped wgmma tier's device (moeTierFor)
    commit = os.environ.get("METRALE_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M")
    for shape, (h, inter, e, top_k) in ((k, v) for k, v in SHAPES.items() if k in args.shapes.split(",")):
        for fmt in (("w4a16",) if args.fused else ("w4a16", "w4a4") if args.prefill else ("w8a8", "w8a8blk")
                    if args.fp8 else FORMATS):
            gate, up, down = Proj(fmt, e, inter, h, 1), Proj(fmt, e, inter, h, 2), Proj(fmt, e, h, inter, 3)
            per_expert = gate.expert_bytes + up.expert_bytes + down.expert_bytes
            ms = ((1024, M_PREFILL) if args.prefill else (1, 16, 64, M_PREFILL) if args.fp8
                  else M_DECODE + (() if args.fused else (M_PREFILL,)))
            for m in ms:
                dense = None
                anchor = {}
                for kind, forced in _variants(m, args.fused, args.prefill, args.fp8, args.variants):
                    routes = [routing(m, e, top_k, kind, 100 * m + r) for r in range(REPS)]
                    x = torch.randn(m, h, device="cuda").to(torch.bfloat16)
                    act = torch.randn(m, top_k, inter, device="cuda").to(torch.bfloat16)

                    def call(i):
                        ids, w = routes[i % REPS]
                        gate.grouped(x, ids)
                        up.grouped(x, ids)
                        down.grouped(act, ids, w)

                    knob = {"slots": ("METRALE_MOE_SLOT_MAX", m * top_k),
                            "sorted16": ("METRALE_MOE_STREAM8_MAX", 8), "fused": ("METRALE_MOE_FUSED", 1),
                            "fused2": ("METRALE_MOE_FUSED", 2), "smem": ("METRALE_MOE_WGMMA", 0),
                            "wg64": ("METRALE_MOE_WGMMA", 64), "wg128": ("METRALE_MOE_WGMMA", 128),
                            "fp8": ("METRALE_MOE_FP8", 1)}.get(forced)
                    if knob:  # read by the launchers at capture
                        os.environ[knob[0]] = str(knob[1])
                    try:
                        t = time_graph(call, reps=REPS)
                    finally:
                        if knob:
                            os.environ.pop(knob[0], None)
                    path = "sorted (fp8 wgmma)" if forced == "fp8" else forced or ("slots" if m * top_k <= SLOT_MAX else
                                      "sorted (wgmma)" if m > 128 and fmt in ("w4a16", "w4a4") and wgmma
                                      else "sorted")
                    distinct = statistics.mean(len(torch.unique(r[0])) for r in routes)
                    ideal = distinct * per_expert / (bw * 1e12)
                    if dense is None:  # today's dense export does not depend on the routing
                        y1 = torch.empty(m, inter, dtype=torch.bfloat16, device="cuda")
                        y2 = torch.empty(m, h, dtype=torch.bfloat16, device="cuda")
                        xd = torch.randn(m, inter, device="cuda").to(torch.bfloat16)
                        tg = time_graph(lambda i: gate.dense(x, y1, i % e), reps=REPS)
                        td = time_graph(lambda i: down.dense(xd, y2, i % e), reps=REPS)
                        dense = e * (2 * tg + td)
                    row = dict(shape=shape, fmt=fmt, m=m, routing=kind, path=path, us=t * 1e6, distinct=distinct,
                               ideal_us=ideal * 1e6, vs_ideal=t / ideal, dense_us=dense * 1e6, speedup=dense / t)
                    if m >= 1024:
                        if kind not in anchor:  # one anchor per routing, shared by the variants
                            wb = [torch.randn(e, p.n, p.k, device="cuda").to(torch.bfloat16) * 0.02
                                  for p in (gate, up, down)]
                            anchor[kind] = grouped_mm_anchor(x, routes[0][0], wb, e)
                            del wb
                        ta, name = anchor[kind]
                        row.update(anchor=name, anchor_us=ta * 1e6, vs_anchor=ta / t)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            del gate, up, down
            torch.cuda.empty_cache()
            write_tables(out, rows, bw, commit, stamp)
    print((out / f"moe-{stamp}-{commit[:7]}.md").read_text())


def _variants(m: int, fused: bool, prefill: bool = False, fp8: bool = False, only: str = "") -> list:
    """(routing, forced path or None) pairs timed at m (``only``: --prefill's variants to keep)."""
    if fp8:
        return [(r, f) for r in ROUTINGS for f in (None, "fp8")]
    if prefill:
        keep = set(only.split(",")) if only else {"default", "smem", "wg64", "wg128"}
        return [(r, f) for r in ROUTINGS for f in (None, "smem", "wg64", "wg128") if (f or "default") in keep]
    if fused:
        return [(r, f) for r in ROUTINGS for f in (None, "fused", "fused2")]
    return [(r, None) for r in (ROUTINGS if m in M_DECODE else ("uniform",))] + \
        ([("uniform", "slots"), ("uniform", "sorted16")] if m in M_BOTH_PATHS else [])


def write_tables(out: Path, rows: list, bw: float, commit: str, stamp: str) -> None:
    """The results so far (rewritten after every shape and format: a run cut short keeps its rows)."""
    dev = torch.cuda.get_device_name()
    lines = [f"# Grouped-expert kernels, {dev}, commit {commit}", "",
             f"copy bandwidth (read + write) measured in this run: {bw:.2f} TB/s. Decode target: time <= 1.25 x "
             "ideal (distinct experts' bytes / copy bandwidth). Prefill target: anchor / ours >= 0.8. dense: today's "
             "dense export, E x the measured dense kernels of one expert.", "",
             "| shape | format | M | routing | path | us | distinct experts | ideal us | time / ideal | dense export us | "
             "speed-up vs dense | anchor | anchor us | anchor / ours |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['fmt']} | {r['m']} | {r['routing']} | {r['path']} | {r['us']:.1f} | "
                     f"{r['distinct']:.1f} | "
                     f"{r['ideal_us']:.1f} | {r['vs_ideal']:.2f} | {r['dense_us']:.0f} | {r['speedup']:.1f}x | "
                     f"{r.get('anchor', '')} | {r.get('anchor_us', 0):.0f} | {r.get('vs_anchor', 0):.2f} |")
    text = "\n".join(lines) + "\n"
    (out / f"moe-{stamp}-{commit[:7]}.md").write_text(text)
    (out / f"moe-{stamp}-{commit[:7]}.json").write_text(json.dumps(dict(device=dev, commit=commit, copy_tbs=bw, rows=rows), indent=1))


if __name__ == "__main__":
    main()
