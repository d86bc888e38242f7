"""Quantizer benchmark: the float-weight W4A16 quantizer (ops/w4a16.py) against ONNX Runtime's int4
block quantizer, the one ONNX Runtime GenAI's model builder (`-p int4`) calls, on the same tensors.

Held-out weights: seeded Gaussian bf16 projections of Qwen3 shapes with 0.5% of the input channels
scaled x10 (outlier channels), a seed family no test uses. For every projection both quantizers
run on the same tensor, one tensor at a time (the peer's whole builder needs > 20 GiB on 8B; its
quantization routine on one tensor needs ~1 GiB):
- weight error: ||W - deq(Q(W))|| / ||W|| per projection, median over projections (all 196 of
  Qwen3-0.6B; one decoder layer's seven of Qwen3-8B, whose layers are drawn alike);
- logits (Qwen3-0.6B): a transformers Qwen3ForCausalLM (float32) with the held-out weights; its
  logits against the same model with every projection replaced by each quantizer's dequantized
  weights (lm_head float on both sides), relative Frobenius error over 2 x 32 random tokens;
- time: CPU time of our quantizer with and without the search over one 8B decoder layer (torch on
  one thread, as measured), times 36 layers: the export's quantization stage on 8B.

    python benchmarks/bench_quant.py              # both shapes, table under benchmarks/results/
    python benchmarks/bench_quant.py --quick      # a smoke check (two layers of 0.6B, no 8B)
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_export import SHAPES, _commit  # noqa: E402
from metrale_export.ops import w4a16  # noqa: E402

SHAPES = {**SHAPES, "qwen3-0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072,
                                        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                                        head_dim=128, tie_word_embeddings=True)}
KINDS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
OUTLIER_FRACTION = 0.005
SEED_BASE = 15_000_000  # held out: tests seed below 10_000


def proj_shapes(cfg: dict) -> dict[str, tuple[int, int]]:
    h, i, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    return {"q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q),
            "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i)}


def held_out_weight(shape: tuple[int, int], layer: int, kind: str) -> torch.Tensor:
    n, k = shape
    g = torch.Generator().manual_seed(SEED_BASE + 16 * layer + KINDS.index(kind))
    w = torch.randn(n, k, generator=g) * 0.02
    w[:, torch.randperm(k, generator=g)[: max(1, round(OUTLIER_FRACTION * k))]] *= 10
    return w.to(torch.bfloat16)


def peer_int4(w: torch.Tensor, block: int, symmetric: bool = True) -> torch.Tensor:
    """ONNX Runtime's MatMulNBits int4 quantizer (MLAS) on W [N, K], dequantized to float32 [N, K]."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                 DefaultWeightOnlyQuantizer)

    n, k = w.shape
    quant = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric))
    packed, scales, zp = quant.qbits_block_quant(w.to(torch.float32).T.contiguous().numpy())  # MatMul's B is [K, N]
    p = torch.from_numpy(packed).reshape(n, -1)
    codes = torch.stack((p & 0xF, p >> 4), -1).reshape(n, k).to(torch.float32)
    s = torch.from_numpy(scales).reshape(n, -1).to(torch.float32).repeat_interleave(block, 1)
    if symmetric:
        z = 8.0
    else:
        zb = torch.from_numpy(zp).reshape(n, -1)
        z = torch.stack((zb & 0xF, zb >> 4), -1).reshape(n, -1)[:, : k // block].to(torch.float32)
        z = z.repeat_interleave(block, 1)
    return (codes - z) * s


def ours(w: torch.Tensor, group: int, symmetric: bool = True, search: bool = True) -> torch.Tensor:
    q = w4a16.quantize(w, group, symmetric, search=search)
    return w4a16.dequantize(q.weight, q.weight_scale, q.zero_point, group)


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.to(torch.float64)
    return float((a.to(torch.float64) - ref).norm() / ref.norm())


METHODS = {  # label -> dequantized weight; "ours g32" / "ours g128": the export's default (zero points, search)
    "ours g32": lambda w: ours(w, 32, symmetric=False), "peer b32": lambda w: peer_int4(w, 32),
    "ours g128": lambda w: ours(w, 128, symmetric=False), "peer b128": lambda w: peer_int4(w, 128),
    "ours g32 symmetric": lambda w: ours(w, 32), "ours g128 symmetric": lambda w: ours(w, 128),
    "ours g32, no search": lambda w: ours(w, 32, symmetric=False, search=False),
    "ours g128, no search": lambda w: ours(w, 128, symmetric=False, search=False),
    "ours g32 symmetric, no search": lambda w: ours(w, 32, search=False),
    "ours g128 symmetric, no search": lambda w: ours(w, 128, search=False),
    "peer b32 asymmetric": lambda w: peer_int4(w, 32, symmetric=False),
    "peer b128 asymmetric": lambda w: peer_int4(w, 128, symmetric=False),
}
PAIRS = (("w4a16 g32 (default) vs int4 b32", "ours g32", "peer b32"),
         ("w4a16 g128 (default) vs int4 b128", "ours g128", "peer b128"),
         ("--symmetric g32 vs b32", "ours g32 symmetric", "peer b32"),
         ("--symmetric g128 vs b128", "ours g128 symmetric", "peer b128"),
         ("--no-scale-search g32 vs b32", "ours g32, no search", "peer b32"),
         ("--no-scale-search g128 vs b128", "ours g128, no search", "peer b128"),
         ("--symmetric --no-scale-search g32 vs b32", "ours g32 symmetric, no search", "peer b32"),
         ("--symmetric --no-scale-search g128 vs b128", "ours g128 symmetric, no search", "peer b128"),
         ("default g32 vs the peer's asymmetric b32", "ours g32", "peer b32 asymmetric"),
         ("default g128 vs the peer's asymmetric b128", "ours g128", "peer b128 asymmetric"))


MAIN_METHODS = ("ours g32", "peer b32", "ours g128", "peer b128", "ours g32 symmetric", "ours g128 symmetric")
LOGITS_METHODS = MAIN_METHODS


def weight_errors(shape: str, layers: list[int], all_methods_layers: int) -> dict[str, list[float]]:
    """Errors per method and projection; the secondary methods on the first layers only (time)."""
    shapes = proj_shapes(SHAPES[shape])
    errs: dict[str, list[float]] = {m: [] for m in METHODS}
    for i, layer in enumerate(layers):
        for kind in KINDS:
            w = held_out_weight(shapes[kind], layer, kind)
            for label in (METHODS if i < all_methods_layers else MAIN_METHODS):
                errs[label].append(rel(METHODS[label](w), w))
        print(f"{shape}: layer {layer} done", flush=True)
    return errs


def logits_errors(shape: str, layers: int | None) -> dict[str, float]:
    """Relative logits error of each quantizer's weights against the float model (transformers)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from benchmarks.bench_export import qwen3_config

    cfg = qwen3_config(SHAPES[shape])
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    cfg["torch_dtype"] = "float32"
    torch.manual_seed(SEED_BASE)
    model = Qwen3ForCausalLM(Qwen3Config(**cfg)).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0, 0.02)
    shapes = proj_shapes(SHAPES[shape])
    linears = {}
    for layer, block in enumerate(model.model.layers):
        for kind in KINDS:
            mod = getattr(block.self_attn if kind in KINDS[:4] else block.mlp, kind)
            linears[(layer, kind)] = mod
            with torch.no_grad():
                mod.weight.copy_(held_out_weight(shapes[kind], layer, kind).to(torch.float32))
    ids = torch.randint(0, cfg["vocab_size"], (2, 32), generator=torch.Generator().manual_seed(SEED_BASE))
    with torch.no_grad():
        ref = model(ids).logits.to(torch.float64)
    out = {}
    for label in LOGITS_METHODS:
        with torch.no_grad():
            for (layer, kind), mod in linears.items():
                mod.weight.copy_(METHODS[label](held_out_weight(shapes[kind], layer, kind)))
            out[label] = rel(model(ids).logits, ref)
        print(f"{shape} logits: {label} {out[label]:.4f}", flush=True)
    return out


def quantizer_seconds(shape: str) -> tuple[dict[str, float], dict[str, int]]:
    """CPU seconds of our quantizer over one decoder layer's projections (zero points or not, with and
    without the search) and the bytes of the tensors it writes (codes, scales, zero points)."""
    torch.set_num_threads(1)
    shapes = proj_shapes(SHAPES[shape])
    ws = [held_out_weight(shapes[kind], 0, kind) for kind in KINDS]
    out, size = {}, {}
    for group in (128, 32):
        for symmetric in (False, True):
            for search in (False, True):
                times = []
                for _ in range(3):
                    t = time.process_time()
                    qs = [w4a16.quantize(w, group, symmetric, search=search) for w in ws]
                    times.append(time.process_time() - t)
                label = f"g{group}{' symmetric' if symmetric else ''}{'' if search else ', no search'}"
                out[label] = statistics.median(times)
                size[f"g{group}{' symmetric' if symmetric else ''}"] = sum(
                    t.numel() * t.element_size() for q in qs for t in (q.weight, q.weight_scale, q.zero_point)
                    if t is not None)
    torch.set_num_threads(os.cpu_count() or 1)
    return out, size


def render(sections: list[tuple[str, dict, int]], logits: dict | None, timing: tuple | None, args,
           commit: str) -> str:
    import onnxruntime

    lines = [f"# Quantizer benchmark, {datetime.date.today().isoformat()}", "",
             f"- commit: {commit} (`metrale_export/` as imported at the start of the run)",
             f"- machine: {os.cpu_count()} CPUs, CPython {platform.python_version()}, torch {torch.__version__}, "
             f"onnxruntime {onnxruntime.__version__} (the peer: `DefaultWeightOnlyQuantizer`, MLAS int4, which "
             "onnxruntime-genai's builder calls for `-p int4`: symmetric, round to nearest, `int4_is_symmetric` "
             "true by default)",
             f"- held-out weights: Gaussian (std 0.02) bf16, {OUTLIER_FRACTION:.1%} of the input channels x10, "
             f"seeds from {SEED_BASE}; W4A16 scales stored as {str(w4a16.SCALE_DTYPE).replace('torch.', '')}; "
             f"search grid: range shrink {w4a16.ASYMMETRIC_SHRINK} (zero points, the default), divisors "
             f"{w4a16.SYMMETRIC_DIVISORS} (`--symmetric`)",
             f"- run: `python benchmarks/bench_quant.py --layers {args.layers} --all-methods-layers "
             f"{args.all_methods_layers} --layers-8b {args.layers_8b} --all-methods-layers-8b "
             f"{args.all_methods_layers_8b} --logits-layers "
             f"{args.logits_layers}`"]
    checks = []
    for shape, errs, count in sections:
        lines += ["", f"## Weight error, `{shape}` ({count} projections)", ""]
        secondary = args.all_methods_layers if shape == "qwen3-0.6b" else args.all_methods_layers_8b
        lines += [f"Relative error ||W - deq(Q(W))|| / ||W||, median over projections. The `--no-scale-search` "
                  f"and peer-asymmetric rows: the first {secondary} layer(s)' projections (time); the peer's "
                  "median beside them is over the same projections.", "",
                  "| pair | ours (median) | peer (median) | ours / peer | projections where ours < peer |",
                  "|---|---:|---:|---:|---:|"]
        for name, a, b in PAIRS:
            n = min(len(errs[a]), len(errs[b]))  # the secondary rows ran on the first layers only
            ea, eb = errs[a][:n], errs[b][:n]
            if not ea:
                continue
            wins = sum(x < y for x, y in zip(ea, eb))
            ma, mb = statistics.median(ea), statistics.median(eb)  # over the same projections
            lines.append(f"| {name} | {ma:.4f} | {mb:.4f} | {ma / mb:.3f} | {wins} / {len(ea)} |")
            if name.startswith("w4a16 g"):
                checks.append((f"`{shape}` {name}: ours / peer <= 0.90", ma / mb <= 0.90, f"{ma / mb:.3f}"))
    if logits:
        lines += ["", f"## Logits error against transformers (float32), `qwen3-0.6b` widths, {args.logits_layers} "
                  "layers, lm_head float", "",
                  "| weights | relative logits error |", "|---|---:|"]
        lines += [f"| {k} | {v:.4f} |" for k, v in logits.items()]
        lines += ["", f"ours / peer: g32 {logits['ours g32'] / logits['peer b32']:.3f}, "
                      f"g128 {logits['ours g128'] / logits['peer b128']:.3f} (default); `--symmetric`: g32 "
                      f"{logits['ours g32 symmetric'] / logits['peer b32']:.3f}, g128 "
                      f"{logits['ours g128 symmetric'] / logits['peer b128']:.3f}"]
        for g in (32, 128):
            r = logits[f"ours g{g}"] / logits[f"peer b{g}"]
            checks.append((f"logits, g{g} (default): ours < peer", r < 1.0, f"{r:.3f}"))
    if timing:
        seconds, size = timing
        lines += ["", "## Quantizer time, `qwen3-8b` (one decoder layer, CPU seconds, torch on one thread)", "",
                  "| w4a16 quantizer | one layer (s) | x 36 layers (s) |", "|---|---:|---:|"]
        lines += [f"| {k}{' (default)' if k in ('g128', 'g32') else ''} | {v:.2f} | {36 * v:.0f} |"
                  for k, v in seconds.items()]
        lines.append("")
        for g in (128, 32):
            d = 36 * (seconds[f"g{g}"] - seconds[f"g{g}, no search"])
            prev = 36 * (seconds[f"g{g}"] - seconds[f"g{g} symmetric"])
            plain = 36 * (seconds[f"g{g}"] - seconds[f"g{g} symmetric, no search"])
            lines.append(f"- g{g}: the default costs {d:+.0f} CPU s over its own round to nearest, {prev:+.0f} s over "
                         f"`--symmetric` (the former default), {plain:+.0f} s over symmetric round to nearest, "
                         "for the 36 layers")
        lines += ["", "## Quantized projection bytes, `qwen3-8b` (codes, scales, zero points; one layer, x 36)", "",
                  "| w4a16 | one layer (MiB) | x 36 layers (GiB) | zero points add |", "|---|---:|---:|---:|"]
        for g in (128, 32):
            a, b = size[f"g{g}"], size[f"g{g} symmetric"]
            lines.append(f"| g{g} (default, zero points) | {a / 2**20:.1f} | {36 * a / 2**30:.3f} | "
                         f"{100 * (a / b - 1):+.2f}% |")
            lines.append(f"| g{g} `--symmetric` | {b / 2**20:.1f} | {36 * b / 2**30:.3f} | |")
    if checks:
        lines += ["", "## The issue's targets in this run", "", "| target | holds | measured |", "|---|---|---:|"]
        lines += [f"| {name} | {'yes' if ok else '**no**'} | {v} |" for name, ok, v in checks]
    lines += ["", "Reproduce: `make bench-export` (runs this first), or `python benchmarks/bench_quant.py`.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two layers of qwen3-0.6b only (a smoke check)")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--layers", type=int, default=28, help="qwen3-0.6b decoder layers whose projections are measured")
    ap.add_argument("--all-methods-layers", type=int, default=4,
                    help="of those, the layers the secondary rows (no search, asymmetric) also run on")
    ap.add_argument("--layers-8b", type=int, default=1, help="qwen3-8b decoder layers whose projections are measured")
    ap.add_argument("--all-methods-layers-8b", type=int, default=1, help="the secondary rows' layers on qwen3-8b")
    ap.add_argument("--logits-layers", type=int, default=28, help="depth of the logits model (0.6B widths)")
    args = ap.parse_args(argv)
    commit = _commit()  # before the long run: the code imported now is what is measured
    if args.quick:
        args.layers, args.all_methods_layers, args.logits_layers = 2, 2, 2
    sections = [("qwen3-0.6b", weight_errors("qwen3-0.6b", list(range(args.layers)), args.all_methods_layers),
                 7 * args.layers)]
    if not args.quick:
        sections.append(("qwen3-8b", weight_errors("qwen3-8b", list(range(args.layers_8b)), args.all_methods_layers_8b),
                         7 * args.layers_8b))
    logits = logits_errors("qwen3-0.6b", args.logits_layers)
    timing = None if args.quick else quantizer_seconds("qwen3-8b")
    text = render(sections, logits, timing, args, commit)
    print(text)
    if not args.quick:
        args.results.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M")
        dest = args.results / f"quant-{stamp}-{commit.split()[0]}.md"  # <kind>-YYYYMMDD-HHMM-<commit>
        dest.write_text(text)
        print(f"written to {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
