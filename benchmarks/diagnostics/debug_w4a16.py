"""Where the W4A16 demo model on the GPU loses row invariance and its distance to ONNX Runtime.

Usage (GPU machine, kernel library built): python -m benchmarks.diagnostics.debug_w4a16 CKPT_DIR [NPZ]
  CKPT_DIR: the demo checkpoint (``python -m benchmarks.model_check prepare .devicecarry`` writes
  .devicecarry/demo); NPZ: its ort_reference.npz (optional, for the prefill error).

What it prints, all from this run:
1. torch on this GPU alone: whether the non-metrale ops the model uses (the RMSNorm reduction, the
   attention matmuls, softmax) give bitwise the same row alone as inside a batch of 33.
2. Decode, 33 sequences alone vs batched (the inputs of compare/row_invariance.py): every module
   (forward hooks, in call order) whose output rows differ, and whether its input rows (for a
   projection: bf16(input), all the kernel reads) differ too. The first module whose output
   differs while its input does not is where row invariance is lost.
3. For a projection with identical bf16 input rows but different output rows (a kernel bug): the
   projection re-run on the captured input at M = 1 and the failing M, the differing elements with
   their x row, codes and scales, and the CPU reference op's value.
4. Prefill (2 x 7 rows) and the 33-row decode batch: every projection's GPU output against the CPU
   reference op (metrale_export.ops.w4a16.proj) on the same captured input, as the largest
   |gpu - cpu| / (2^-24 * sum_k |bf16(x)| |bf16(w)|) (float32 accumulation noise is a small
   number here; a wrong weight or index gives thousands).
5. Prefill logits against ONNX Runtime with the GPU's projections and with the CPU reference's
   projections substituted on the GPU (same model otherwise), to show how the error arises.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import torch

from benchmarks.model_check import build_model, model_inputs
from metrale_export.compare.row_invariance import decode_inputs
from metrale_export.exporter.projection import Projection
from metrale_export.ops import w4a16
from metrale_export.ops.numerics import bf16_round, unpack_nibbles

U = 2.0 ** -24


def _rows_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    return not torch.equal(a.contiguous().view(torch.int8), b.contiguous().view(torch.int8))


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


class Recorder:
    """Forward hooks on every module: (name, module, input[0], output[0]) in call order."""

    def __init__(self, model):
        self.records: list[tuple] = []
        self.on = False
        self.hooks = []
        for name, mod in model.named_modules():
            if name:
                self.hooks.append(mod.register_forward_hook(self._hook(name)))

    def _hook(self, name):
        def hook(mod, inp, out):
            if not self.on:
                return
            x = inp[0] if inp and torch.is_tensor(inp[0]) else None
            y = _first(out)
            self.records.append((name, mod, None if x is None else x.detach().clone(),
                                 y.detach().clone() if torch.is_tensor(y) else None))
        return hook

    def run(self, model, inputs):
        self.records = []
        self.on = True
        with torch.no_grad():
            out = model(*inputs)
        self.on = False
        return out, self.records


def torch_invariance(device) -> None:
    print("## 1. torch ops on this GPU: row alone vs in a batch of 33 (rows differing)")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(33, 1, 256, generator=g).to(device)
    ms = lambda t: t.pow(2).mean(-1, keepdim=True)  # noqa: E731
    for name, f, t in (
        ("pow(2).mean(-1) [33,1,256]", ms, x),
        ("pow(2).mean(-1) [33,1,4,64]", ms, x.reshape(33, 1, 4, 64)),
        ("softmax(-1) [33,4,1,6]", lambda t: torch.softmax(t, -1), torch.randn(33, 4, 1, 6, generator=g).to(device)),
    ):
        full = f(t)
        bad = [i for i in range(33) if _rows_differ(f(t[i:i + 1])[0], full[i])]
        print(f"- {name}: {len(bad)} rows differ {bad[:8]}")
    for heads, d, total in ((4, 64, 6), (8, 32, 6), (4, 64, 16)):
        q = torch.randn(33, heads, 1, d, generator=g).to(device)
        k = torch.randn(33, heads, total, d, generator=g).to(device)
        v = torch.randn(33, heads, total, d, generator=g).to(device)
        s = torch.matmul(q, k.transpose(2, 3))
        bad = [i for i in range(33) if _rows_differ(torch.matmul(q[i:i + 1], k[i:i + 1].transpose(2, 3))[0], s[i])]
        p = torch.softmax(s, -1)
        o = torch.matmul(p, v)
        bad2 = [i for i in range(33) if _rows_differ(torch.matmul(p[i:i + 1], v[i:i + 1])[0], o[i])]
        print(f"- matmul q k^T [33,{heads},1,{d}]x[..,{d},{total}]: {len(bad)} rows differ {bad[:8]}; "
              f"p v: {len(bad2)} rows differ {bad2[:8]}")
    print()


def cpu_proj(mod: Projection, x: torch.Tensor) -> torch.Tensor:
    s = mod.spec
    zp = mod._opt("zero_point")
    bias = mod._opt("bias")
    x2 = x.reshape(-1, s.k).float().cpu()
    return w4a16.proj(x2, mod.weight.cpu(), mod.weight_scale.cpu(), None if zp is None else zp.cpu(),
                      None if bias is None else bias.cpu(), int(s.attrs["group_size"]))


def noise_ratio(mod: Projection, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(max |gpu - cpu| / (2^-24 sum |xb||wb|), max |gpu - cpu|) over the projection's outputs."""
    s = mod.spec
    ref = cpu_proj(mod, x).double()
    zp = mod._opt("zero_point")
    wb = bf16_round(w4a16.dequantize(mod.weight.cpu(), mod.weight_scale.cpu(), None if zp is None else zp.cpu(),
                                     int(s.attrs["group_size"]))).double()
    xb = bf16_round(x.reshape(-1, s.k).float().cpu()).double()
    scale = (xb.abs() @ wb.abs().T) * U
    d = (y.reshape(-1, s.n).double().cpu() - ref).abs()
    return float((d / scale.clamp_min(1e-300)).max()), float(d.max())


def explain_projection(name: str, mod: Projection, xb_batched: torch.Tensor, row: int) -> None:
    """Re-run a projection at M = 1 and at the failing M; print the differing elements."""
    s = mod.spec
    x = xb_batched.reshape(-1, s.k)
    m = x.shape[0]
    with torch.no_grad():
        full = mod(x)
        alone = mod(x[row:row + 1])
    d = (full[row] != alone[0]).nonzero().flatten().tolist()
    print(f"### {name}: M={m} vs M=1, row {row}: {len(d)} of {s.n} outputs differ")
    ref = cpu_proj(mod, x[row:row + 1])[0]
    codes = unpack_nibbles(mod.weight.cpu())
    g = int(s.attrs["group_size"])
    for n in d[:4]:
        print(f"- n={n}: batched {full[row, n].item()!r} alone {alone[0, n].item()!r} cpu {ref[n].item()!r}")
        print(f"  codes {codes[n].tolist()}")
        print(f"  scales {mod.weight_scale[n].tolist()}  group {g}")
    print(f"  x row (bf16): {bf16_round(x[row].float().cpu()).tolist()}")


def decode_check(model, rec: Recorder, device) -> None:
    print("## 2. decode: 33 sequences alone vs batched (modules whose output rows differ, call order)")
    seqs = decode_inputs(model, 33, 5, 0, device)
    alone = [rec.run(model, s)[1] for s in seqs]
    _, batched = rec.run(model, [torch.cat([s[j] for s in seqs], dim=0) for j in range(len(seqs[0]))])
    first_kernel = None
    shown = 0
    for idx, (name, mod, xb, yb) in enumerate(batched):
        if yb is None:
            continue
        out_rows, in_rows = [], []
        worst = 0.0
        for i in range(33):
            _, _, xa, ya = alone[i][idx]
            if _rows_differ(yb[i], ya[0]):
                out_rows.append(i)
                worst = max(worst, float((yb[i].float() - ya[0].float()).abs().max()))
            if xb is not None and xa is not None:
                a, b = (bf16_round(xb[i].float()), bf16_round(xa[0].float())) if isinstance(mod, Projection) \
                    else (xb[i], xa[0])
                if _rows_differ(a, b):
                    in_rows.append(i)
        if out_rows or in_rows:
            kind = "projection, input compared as bf16" if isinstance(mod, Projection) else type(mod).__name__
            print(f"- {name} ({kind}): output rows differ {out_rows[:8]} (max {worst:.3e}); "
                  f"input rows differ {in_rows[:8]}")
            shown += 1
            if isinstance(mod, Projection) and first_kernel is None:
                fresh = [r for r in out_rows if r not in in_rows]
                if fresh:
                    first_kernel = (name, mod, xb, fresh[0])
        if shown > 40:
            print("- ... (more)")
            break
    if not shown:
        print("- none: every module output row is bitwise the row alone")
    print()
    if first_kernel is not None:
        print("## 3. a projection whose output differs with the same bf16 input")
        explain_projection(*first_kernel)
    else:
        print("## 3. no projection's output differs while its bf16 input is the same (the kernels keep rows)")
    print()
    print("## 4b. decode batch of 33: projections vs the CPU reference op (noise ratio, max abs)")
    for name, mod, xb, yb in batched:
        if isinstance(mod, Projection):
            r, d = noise_ratio(mod, xb, yb)
            print(f"- {name}: {r:.2f} ({d:.3e})")
    print()


def prefill_check(model, rec: Recorder, device, npz: Path | None) -> None:
    print("## 4. prefill (2 x 7 rows): projections vs the CPU reference op on the captured input")
    inputs = [t.to(device) for t in model_inputs(model, "prefill")]
    out, recs = rec.run(model, inputs)
    for name, mod, xb, yb in recs:
        if isinstance(mod, Projection):
            r, d = noise_ratio(mod, xb, yb)
            print(f"- {name}: noise ratio {r:.2f} (max abs diff {d:.3e})")
    print()
    if npz is None or not npz.exists():
        return
    refs = np.load(npz)
    key = "demo/w4a16/prefill" if "demo/w4a16/prefill" in refs else "w4a16/prefill"
    ref = refs[key]
    rel = lambda a: float(np.linalg.norm(a - ref) / np.linalg.norm(ref))  # noqa: E731
    print("## 5. prefill logits vs ONNX Runtime")
    print(f"- GPU kernels: {rel(out[0].float().cpu().numpy()):.3e}")
    # Same GPU model, each projection replaced by the CPU reference op (float32, torch's order).
    hooks = []
    for _, mod in model.named_modules():
        if isinstance(mod, Projection):
            hooks.append(mod.register_forward_hook(
                lambda m, inp, o: cpu_proj(m, inp[0]).to(o.device).reshape(o.shape)))
    with torch.no_grad():
        sub = model(*inputs)[0].float().cpu().numpy()
    for h in hooks:
        h.remove()
    print(f"- GPU model, projections by the CPU reference op: {rel(sub):.3e}")
    # And the CPU reference's projections with each output perturbed by +-1 float32 ulp at random.
    gen = torch.Generator().manual_seed(0)
    for trial in range(4):
        hooks = []
        for _, mod in model.named_modules():
            if isinstance(mod, Projection):
                def perturb(m, inp, o):
                    y = cpu_proj(m, inp[0])
                    step = torch.randint(-1, 2, y.shape, generator=gen).float()
                    y = torch.where(step > 0, torch.nextafter(y, torch.full_like(y, float("inf"))),
                                    torch.where(step < 0, torch.nextafter(y, torch.full_like(y, float("-inf"))), y))
                    return y.to(o.device).reshape(o.shape)
                hooks.append(mod.register_forward_hook(perturb))
        with torch.no_grad():
            pert = model(*inputs)[0].float().cpu().numpy()
        for h in hooks:
            h.remove()
        print(f"- CPU reference projections, outputs moved by one ulp at random (trial {trial}): {rel(pert):.3e}")
    print()


def main() -> int:
    import metrale_export.ops.cuda  # noqa: F401  (registers the CUDA kernels)

    ckpt = Path(sys.argv[1])
    npz = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    device = os.environ.get("DEBUG_DEVICE", "cuda")
    torch_invariance(device)
    model = build_model(ckpt, "w4a16", device)
    rec = Recorder(model)
    decode_check(model, rec, device)
    prefill_check(model, rec, device, npz)
    return 0


if __name__ == "__main__":
    sys.exit(main())
