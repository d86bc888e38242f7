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
MODELS = ("demo", "hybrid")
CASES = {"prefill": (2, 7, 0), "decode": (3, 1, 9)}
SEEDS = {"prefill": 11, "decode": 12}


def _build(ckpt_dir: Path, fmt: str, device: str):
    from metrale_export.exporter.checkpoint import Checkpoint
    from metrale_export.exporter.config import parse_config
    from metrale_export.exporter.layers.model import CausalLM
    from metrale_export.exporter.quantization import FloatSource, QuantRequest

    ckpt = Checkpoint.open(ckpt_dir)
    cfg = parse_config(ckpt.config)
    src = FloatSource(ckpt, QuantRequest(weight=fmt, quantize_lm_head=True))
    return CausalLM(cfg, src).load_weights(src).to(device).eval()


def _inputs(model, case: str):
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
    from metrale_export.exporter.demo import write_demo
    from metrale_export.exporter.demo_hybrid import write_hybrid_demo
    from metrale_export.exporter.export import ExportOptions, export
    from metrale_export.exporter.quantization import QuantRequest
    from metrale_export.ops.ort import reference_session

    refs = {}
    for name, writer in (("demo", write_demo), ("hybrid", write_hybrid_demo)):
        ckpt = root / name
        if not (ckpt / "model.safetensors").exists():
            writer(ckpt)
        for fmt in FORMATS:
            out = root / f"onnx_{name}_{fmt}"
            if not (out / "model.onnx").exists():
                export(ckpt / "model.safetensors", out,
                       ExportOptions(request=QuantRequest(weight=fmt, quantize_lm_head=True), force=True))
            sess = reference_session(out / "model.onnx")
            model = _build(ckpt, fmt, "cpu")
            for case in CASES:
                inputs = _inputs(model, case)
                feeds = dict(zip(model.input_names(), (t.numpy() for t in inputs)))
                refs[f"{name}/{fmt}/{case}"] = sess.run(["logits"], feeds)[0]
    np.savez(root / "ort_reference.npz", **refs)
    print(f"wrote {root / 'ort_reference.npz'}: {sorted(refs)}")


def gpu(root: Path, out: Path) -> int:
    import metrale_export.ops.cuda  # noqa: F401  (registers the CUDA kernels)
    from metrale_export.compare.row_invariance import row_invariance
    from metrale_export.ops import tolerances

    refs = np.load(root / "ort_reference.npz")
    lines = ["| model | format | case | rel. error vs ONNX Runtime | bound | ok |", "|---|---|---|---|---|---|"]
    inv_lines = ["| model | format | output | batch | identical rows | max abs diff |", "|---|---|---|---|---|---|"]
    failures = 0
    for name, fmt in ((n, f) for n in MODELS for f in FORMATS):
        model = _build(root / name, fmt, "cuda")
        for case in CASES:
            inputs = [t.cuda() for t in _inputs(model, case)]
            with torch.no_grad():
                logits = model(*inputs)[0].float().cpu().numpy()
            ref = refs[f"{name}/{fmt}/{case}"]
            err = float(np.linalg.norm(logits - ref) / np.linalg.norm(ref))
            ok = err < tolerances.MODEL_QUANTIZED
            failures += not ok
            lines.append(f"| {name} | {fmt} | {case} | {err:.3e} | {tolerances.MODEL_QUANTIZED:.0e} | {'yes' if ok else 'NO'} |")
        for pname, proj in model.projections():
            # Each projection alone: rows of one 33-row launch vs the same rows launched alone.
            g = torch.Generator().manual_seed(3)
            x = (torch.randn(33, proj.spec.k, generator=g)).cuda()
            with torch.no_grad():
                together = proj(x)
                bad = [i for i in range(33) if not torch.equal(proj(x[i:i + 1])[0].view(torch.int8),
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
