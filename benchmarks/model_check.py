"""The demo model on the GPU through the CUDA ops (the plugins' arithmetic), against references
computed on the CPU, plus the row-invariance report. Run by benchmarks/model_check.sh on the device.

Usage: python -m benchmarks.model_check prepare DIR   (CPU: demo checkpoints + ONNX Runtime refs)
       python -m benchmarks.model_check gpu DIR OUT   (GPU: compare and row invariance, tables)

Invariants: the same seeded inputs on both machines; tolerances from metrale_export.ops.tolerances;
every number printed comes from this run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

FORMATS = ("w4a16", "w8a8", "w4a4")
# The logits of two correct evaluations of a W4A16 model (float32 sums in different orders) differ
# by the bf16 rounding of the activations, not by float32 noise: one ulp of one projection output
# that moves one activation across a bf16 rounding boundary changes it by 2^-9 relative, and that
# change spreads to every later position and layer. On the demo model (prefill 2 x 7), the CPU
# reference with its projection outputs moved by +-1 float32 ulp at random is 4e-6 .. 1.2e-3 from
# ONNX Runtime (benchmarks/diagnostics/debug_w4a16.py, 2026-11-29), so MODEL_QUANTIZED (1e-3) cannot hold on
# another device's summation order; the bound below does, and the projection check (each
# projection against the CPU reference op on the GPU's own inputs) is what checks the kernels.
# |gpu - cpu| of a projection, in units of 2^-24 * sum_k |x_k| |w_nk| (float32 accumulation noise;
# measured <= 3.1 on the H200, a wrong weight, scale or index gives 1e4 and more).
NOISE_UNITS = 64.0
MODELS = ("demo", "moe", "hybrid")
CASES = {"prefill": (2, 7, 0), "decode": (3, 1, 9)}
SEEDS = {"prefill": 11, "decode": 12}


def build_model(ckpt_dir: Path, fmt: str, device: str):
    """The PyTorch model of the checkpoint quantized as ``fmt``, on ``device`` (also tests/gpu's)."""
    from metrale_export.exporter.checkpoint import Checkpoint
    from metrale_export.exporter.config import parse_config
    from metrale_export.exporter.layers.model import CausalLM
    from metrale_export.exporter.quantization import FloatSource, QuantRequest

    ckpt = Checkpoint.open(ckpt_dir)
    cfg = parse_config(ckpt.config)
    src = FloatSource(ckpt, QuantRequest(weight=fmt, quantize_lm_head=True))
    return CausalLM(cfg, src).load_weights(src).to(device).eval()


def model_inputs(model, case: str):
    """The seeded inputs of ``case`` (CASES) for ``model`` (also tests/gpu's)."""
    b, s, p = CASES[case]
    g = torch.Generator().manual_seed(SEEDS[case])
    ids = torch.randint(0, model.cfg.vocab_size, (b, s), generator=g)
    pos = torch.arange(p, p + s).expand(b, s).contiguous()
    states = []
    for _, spec in model.state_specs():
        like = spec.example(b, p, model.dtype, "cpu")
        states.append((torch.rand(like.shape, generator=g) * 2 - 1).to(like.dtype))
    return (ids, pos, *states)


def prepare(root: Path) -> None:
    from metrale_export.exporter.demo import write_demo, write_moe_demo
    from metrale_export.exporter.demo_hybrid import write_hybrid_demo
    from metrale_export.exporter.export import ExportOptions, export
    from metrale_export.exporter.quantization import QuantRequest
    from metrale_export.ops.ort import reference_session

    refs = {}
    for name, writer in (("demo", write_demo), ("moe", write_moe_demo), ("hybrid", write_hybrid_demo)):
        ckpt = root / name
        if not (ckpt / "model.safetensors").exists():
            writer(ckpt)
        for fmt in FORMATS:
            out = root / f"onnx_{name}_{fmt}"
            if not (out / "model.onnx").exists():
                export(ckpt / "model.safetensors", out,
                       ExportOptions(request=QuantRequest(weight=fmt, quantize_lm_head=True), force=True))
            sess = reference_session(out / "model.onnx")
            model = build_model(ckpt, fmt, "cpu")
            for case in CASES:
                inputs = model_inputs(model, case)
                feeds = dict(zip(model.input_names(), (t.numpy() for t in inputs)))
                refs[f"{name}/{fmt}/{case}"] = sess.run(["logits"], feeds)[0]
    np.savez(root / "ort_reference.npz", **refs)
    print(f"wrote {root / 'ort_reference.npz'}: {sorted(refs)}")


def projection_noise(model, inputs) -> tuple[float, str]:
    """Largest |gpu - cpu| over the model's projections in NOISE_UNITS units, and where: each
    projection's GPU output against its CPU reference op on the input the GPU model gave it."""
    import copy

    from metrale_export.exporter.projection import Projection

    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o, n=n: seen.append((n, m, i[0].detach(), o.detach())))
             for n, m in model.named_modules() if isinstance(m, Projection)]
    with torch.no_grad():
        model(*inputs)
    for h in hooks:
        h.remove()
    worst, where = 0.0, ""
    cpu = {}
    for pname, mod, x, y in seen:
        if pname not in cpu:
            c = copy.deepcopy(mod).cpu()
            k = mod.spec.k
            with torch.no_grad():  # |W|^T from the reference op itself: rows of the identity
                w = (c(torch.eye(k)) - c(torch.zeros(1, k))).abs().double()
            cpu[pname] = (c, w)
        c, w = cpu[pname]
        x2 = x.reshape(-1, mod.spec.k).float().cpu()
        with torch.no_grad():
            ref = c(x2).double()
        unit = (x2.double().abs() @ w) * 2.0 ** -24
        ratio = float(((y.reshape(ref.shape).double().cpu() - ref).abs() / unit.clamp_min(1e-30)).max())
        if ratio > worst:
            worst, where = ratio, pname
    return worst, where


def stale_weights(model, onnx_path: Path) -> list[str]:
    """The model's tensors that differ from the export's initializers of the same name. The GPU
    model quantizes the checkpoint again (``build_model``); references prepared by another quantizer
    (an older commit) would otherwise show as a kernel error of the whole model."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    bad, matched = [], 0
    for init in graph.initializer:
        if init.name in state:
            matched += 1
            ours, theirs = state[init.name].contiguous(), numpy_helper.to_array(init)
            ours_bytes = (ours.view(torch.int16) if ours.dtype == torch.bfloat16 else ours).numpy().tobytes()
            if tuple(ours.shape) != theirs.shape or ours_bytes != np.ascontiguousarray(theirs).tobytes():
                bad.append(init.name)
    return bad if matched else ["(no tensor of the model is named in the export)"]


def gpu(root: Path, out: Path) -> int:
    import metrale_export.ops.cuda  # noqa: F401  (registers the CUDA kernels)
    from metrale_export.compare.row_invariance import row_invariance
    from metrale_export.ops import tolerances

    refs = np.load(root / "ort_reference.npz")
    lines = ["| model | format | case | rel. error vs ONNX Runtime | bound | projections vs CPU reference op "
             f"on the GPU's inputs, noise units (bound {NOISE_UNITS:g}; worst) | ok |", "|---|---|---|---|---|---|---|"]
    inv_lines = ["| model | format | output | batch | identical rows | max abs diff |", "|---|---|---|---|---|---|"]
    failures = 0
    for name, fmt in ((n, f) for n in MODELS for f in FORMATS):
        model = build_model(root / name, fmt, "cuda")
        stale = stale_weights(model, root / f"onnx_{name}_{fmt}" / "model.onnx")
        if stale:
            print(f"error: {name}/{fmt}: {len(stale)} tensors (e.g. {stale[0]}) differ from the prepared export: "
                  f"the references were prepared by another quantizer; run `python -m benchmarks.model_check "
                  f"prepare` again at this commit", file=sys.stderr)
            return 2
        for case in CASES:
            inputs = [t.cuda() for t in model_inputs(model, case)]
            with torch.no_grad():
                logits = model(*inputs)[0].float().cpu().numpy()
            ref = refs[f"{name}/{fmt}/{case}"]
            err = float(np.linalg.norm(logits - ref) / np.linalg.norm(ref))
            bound = tolerances.MODEL_OTHER_DEVICE_BF16 if fmt == "w4a16" else tolerances.MODEL_QUANTIZED
            noise, where = projection_noise(model, inputs)
            ok = err < bound and noise <= NOISE_UNITS
            failures += not ok
            lines.append(f"| {name} | {fmt} | {case} | {err:.3e} | {bound:.0e} | {noise:.2f} ({where}) | "
                         f"{'yes' if ok else 'NO'} |")
        for pname, proj in model.projections():
            # Each projection alone: rows of one 33-row launch vs the same rows launched alone.
            g = torch.Generator().manual_seed(3)
            x = (torch.randn(33, proj.spec.k, generator=g)).cuda()
            route = ()
            if hasattr(proj.spec, "num_experts"):  # a grouped-expert op: each row's own routing
                s = proj.spec
                ids = torch.stack([torch.randperm(s.num_experts, generator=g)[:s.top_k] for _ in range(33)])
                route = (ids.to(torch.int32).cuda(),)
                if s.combine:  # down_proj: one input row per (row, slot), weighted and summed
                    x = torch.randn(33, s.top_k, s.k, generator=g).cuda()
                    route += (torch.rand(33, s.top_k, generator=g).cuda(),)
            with torch.no_grad():
                together = proj(x, *route)
                bad = [i for i in range(33)
                       if not torch.equal(proj(x[i:i + 1], *(r[i:i + 1] for r in route))[0].view(torch.int8),
                                          together[i].view(torch.int8))]
            if bad:
                inv_lines.append(f"| {name} | {fmt} | projection {pname} (n={proj.spec.n}, k={proj.spec.k}) | 33 | "
                                 f"rows differing: {bad[:8]} | - |")
                failures += 1
        for r in row_invariance(model, [1, 2, 3, 8, 9, 31, 32, 33]):
            if r.output == "logits" or not r.ok:
                inv_lines.append(f"| {name} | {fmt} | {r.output} | {r.batch} | {r.identical_rows}/{r.rows} | {r.max_abs_diff:.3e} |")
            failures += (not r.ok) and r.output == "logits"
    text = "\n".join(["## Demo models (dense; hybrid GDN + attention + MoE) on the GPU through the CUDA ops", "", *lines, "",
                      "## Row invariance (decode rows alone vs in a batch; logits, and any output that differs)",
                      "", *inv_lines, ""])
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_check.md").write_text(text)
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(Path(sys.argv[2]))
    else:
        sys.exit(gpu(Path(sys.argv[2]), Path(sys.argv[3])))
