"""Where a demo model's GPU forward (the CUDA ops) first parts from its CPU forward (the reference
ops) beyond float32 noise (a diagnostic, GPU): every module's output, in forward order, as the
relative error of the GPU's against the CPU's on the same model inputs (model_check's seeded case),
and for each projection the relative error of its input, so a jump at a projection whose input is
still within noise (an fp8 activation one e4m3 step off) shows as such.

    python -m benchmarks.diagnostics.first_divergence MODEL FORMAT CASE [DIR] [OUT_DIR]

e.g. ``hybrid w8a8 decode mc``. W8A8 runs the exact path (METRALE_W8A8_MMA=exact), as model_check's
ONNX Runtime comparison does. Prints the first 40 modules whose output error exceeds 1e-6 (and
writes OUT_DIR/first_divergence.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from benchmarks import model_check as mc


def _outputs(model, inputs):
    from metrale_export.exporter.projection import Projection

    seen = []

    def hook(name, proj):
        def f(m, i, o):
            first = o[0] if isinstance(o, (tuple, list)) else o
            x = i[0] if (proj and i) else None
            if isinstance(first, torch.Tensor):
                seen.append((name, type(m).__name__, first.detach().float().cpu(),
                             None if x is None else x.detach().float().cpu()))
        return f

    hooks = [m.register_forward_hook(hook(n, isinstance(m, Projection))) for n, m in model.named_modules() if n]
    with torch.no_grad():
        model(*inputs)
    for h in hooks:
        h.remove()
    return seen


def _rel(a, b) -> float:
    if a.shape != b.shape:
        return float("nan")
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main(argv: list[str]) -> int:
    import metrale_export.ops.cuda  # noqa: F401  (registers the CUDA kernels)

    name, fmt, case = argv[:3]
    root = Path(argv[3]) if len(argv) > 3 else Path("mc")
    os.environ[mc.W8A8_MMA] = "exact"
    ckpt = mc.demo_checkpoint(root, name)
    cpu = mc.build_model(ckpt, fmt, "cpu")
    gpu = mc.build_model(ckpt, fmt, "cuda")
    inputs = mc.model_inputs(cpu, case)
    got = _outputs(gpu, [t.cuda() for t in inputs])
    want = _outputs(cpu, inputs)
    lines = [f"{name} {fmt} {case}: GPU (CUDA ops, W8A8 exact path) vs CPU (reference ops), per module in "
             "forward order; the first 40 whose output's relative error exceeds 1e-6", "",
             "| # | module | type | output rel. error | input rel. error (projections) |", "|---|---|---|---|---|"]
    shown = 0
    for i, ((n, t, g, gx), (n2, _, w, wx)) in enumerate(zip(got, want)):
        assert n == n2, (n, n2)
        e = _rel(g, w)
        if e > 1e-6 and shown < 40:
            ex = "" if gx is None else f"{_rel(gx, wx):.2e}"
            lines.append(f"| {i} | {n} | {t} | {e:.2e} | {ex} |")
            shown += 1
    lines.append(f"\n{len(got)} module outputs compared.")
    text = "\n".join(lines)
    print(text)
    if len(argv) > 4:
        Path(argv[4]).mkdir(parents=True, exist_ok=True)
        (Path(argv[4]) / "first_divergence.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
