"""The demo models on the GPU through the CUDA ops (the plugins' arithmetic), against references
computed on the CPU, plus the whole-model invariance report (issue 19). Run by
benchmarks/model_check.sh on the device.

Usage: python -m benchmarks.model_check prepare DIR   (CPU: demo checkpoints + ONNX Runtime refs)
       python -m benchmarks.model_check gpu DIR OUT [MODEL:FORMAT ...]   (GPU: compare and
           invariance, tables; the cases named, default every model and format)
       python -m benchmarks.model_check whole DIR OUT [MODEL:FORMAT ...]   (GPU: the whole-model
           invariance section alone, e.g. qwen3-8b-like:w4a16; no references needed)

The demo, Qwen3-MoE demo and hybrid (Qwen3-Next) demo models are compared with ONNX Runtime. Those
and a Qwen3 with 8B-like layers (``QWEN3_8B_LIKE``: random weights written on the device from a
seed, not carried) are checked, in every weight format, for bitwise identity of a sequence's logits
and states (KV cache, GDN conv and recurrent states) (a) alone vs batched with 1..63 others, in
decode and in prefill; (b) prefilled in one chunk vs chunks of 64, 7 and 1 tokens (1: decode token
by token); (c) run to run; and every torch reduction the forward executes outside the metrale ops is
listed (``torch_reductions``).

W8A8 (W8A8Proj version 3) multiplies on the FP8 tensor core by default, whose sums are not the CPU
reference's (tolerances.OP_FP8_ELEMENT): its models are compared with ONNX Runtime on the exact
path (METRALE_W8A8_MMA=exact, the exact-products bounds), and on the default path each projection
is held to the FP8 tensor core's element bound while the logits' error is reported unbounded (an
fp8 activation one e4m3 step off, 6-12%, is a correct evaluation that a logits bound cannot tell
from a fault). The whole-model invariance runs the default path.

Invariants: the same seeded inputs on both machines; tolerances from metrale_export.ops.tolerances;
every number printed comes from this run.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from metrale_export.ops import tolerances

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
# W8A8's default path, the FP8 tensor core: |gpu - cpu| within OP_FP8_ELEMENT of the sum of |terms|.
FP8_NOISE_UNITS = 1e-3 * 2.0**24  # tolerances.OP_FP8_ELEMENT in NOISE_UNITS' units
W8A8_MMA = "METRALE_W8A8_MMA"  # read by the W8A8Proj launcher at each call ("exact": the exact path)
MODELS = ("demo", "moe", "hybrid")
# A Qwen3 with Qwen3-8B's layer shapes, 2 layers, a small vocabulary (the embedding and lm_head are
# not what is checked): about 840 MB of bf16, written where it runs from seed 0 (``write_demo``).
QWEN3_8B_LIKE = {"vocab_size": 4096, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 2,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "max_position_embeddings": 32768}
BIG = "qwen3-8b-like"  # quantized with round to nearest (gpu: scale_search=False)
# The whole-model invariance cases (issue 19): decode rows with a past of DECODE_PAST (beyond the
# first 64-key block) alone vs in every batch of 1..64; prefill rows of PREFILL_SEQ tokens after a
# past of PREFILL_PAST alone vs in batches of PREFILL_BATCHES; a sequence of CHUNK_TOKENS tokens (two
# full 64-key blocks and a part) prefilled in one chunk vs in chunks of CHUNKS tokens.
DECODE_BATCHES = tuple(range(1, 65))
DECODE_PAST = 100
PREFILL_BATCHES = (1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 47, 63, 64)
PREFILL_SEQ, PREFILL_PAST = 16, 40
CHUNK_TOKENS = 150
CHUNKS = (64, 7, 1)
# Torch ops whose result depends on the order of a sum (what a kernel choice by shape changes), and
# the reductions whose result does not (comparisons, selections: exact in any order).
ORDER_SENSITIVE = frozenset({
    "sum", "mean", "nansum", "prod", "cumsum", "cumprod", "logsumexp", "softmax", "_softmax", "log_softmax",
    "_log_softmax", "mm", "bmm", "addmm", "addbmm", "baddbmm", "matmul", "mv", "addmv", "dot", "vdot", "linear",
    "einsum", "tensordot", "convolution", "_convolution", "conv1d", "conv2d", "cudnn_convolution", "norm",
    "linalg_vector_norm", "var", "std", "var_mean", "std_mean", "native_layer_norm", "native_group_norm",
    "_fused_rms_norm", "rms_norm", "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
    "_efficient_attention_forward", "_scaled_mm", "_int_mm", "embedding_bag", "trace"})
ORDER_FREE = frozenset({"max", "min", "amax", "amin", "aminmax", "argmax", "argmin", "topk", "sort", "argsort",
                        "kthvalue", "median", "mode"})
CASES = {"prefill": (2, 7, 0), "decode": (3, 1, 9)}
SEEDS = {"prefill": 11, "decode": 12}


def _model_bound(fmt: str, depth: int) -> float:
    """The logits' bound against ONNX Runtime. W4A16: MODEL_OTHER_DEVICE_BF16. W8A8 (fp8 activations,
    the exact path): compare's own end-to-end bound, depth x the per-layer 2^-8 (ops/tolerances.py):
    the GPU's float32 last bits differ from the CPU's now and then, and each fp8 activation
    quantization carries such a difference across an e4m3 step, which the next layers amplify: on the
    H200 at a13ec1b the hybrid demo's decode measured 1.06e-2 at the lm_head with every op within its
    own bound (benchmarks/diagnostics/first_divergence.py), where MODEL_QUANTIZED (1e-3) had held by
    chance. The same cascade is what compare's end-to-end bound allows on the CPU."""
    if fmt == "w4a16":
        return tolerances.MODEL_OTHER_DEVICE_BF16
    if fmt == "w8a8":
        return tolerances.end_to_end_bound({"fp8"}, depth)
    return tolerances.MODEL_QUANTIZED


def build_model(ckpt_dir: Path, fmt: str, device: str, scale_search: bool = True):
    """The PyTorch model of the checkpoint quantized as ``fmt``, on ``device`` (also tests/gpu's);
    ``scale_search=False``: round to nearest (QuantRequest.scale_search), the same kernels."""
    from metrale_export.exporter.checkpoint import Checkpoint
    from metrale_export.exporter.config import parse_config
    from metrale_export.exporter.layers.model import CausalLM
    from metrale_export.exporter.quantization import FloatSource, QuantRequest

    ckpt = Checkpoint.open(ckpt_dir)
    cfg = parse_config(ckpt.config)
    src = FloatSource(ckpt, QuantRequest(weight=fmt, quantize_lm_head=True, scale_search=scale_search))
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


def demo_checkpoint(root: Path, name: str) -> Path:
    """The checkpoint of demo model ``name`` (MODELS) under ``root``, written from seed 0 if missing
    (the same bytes on every machine: the GPU run need not carry it)."""
    from metrale_export.exporter.demo import write_demo, write_moe_demo
    from metrale_export.exporter.demo_hybrid import write_hybrid_demo

    ckpt = root / name
    if not (ckpt / "model.safetensors").exists():
        {"demo": write_demo, "moe": write_moe_demo, "hybrid": write_hybrid_demo}[name](ckpt)
    return ckpt


def prepare(root: Path) -> None:
    from metrale_export.exporter.export import ExportOptions, export
    from metrale_export.exporter.quantization import QuantRequest
    from metrale_export.ops.ort import reference_session

    refs = {}
    for name in MODELS:
        ckpt = demo_checkpoint(root, name)
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


def write_big(root: Path) -> Path:
    """The 8B-like checkpoint under ``root / BIG`` (written once, from seed 0)."""
    from metrale_export.exporter.demo import DEMO_CONFIG, write_demo

    ckpt = root / BIG
    if not (ckpt / "model.safetensors").exists():
        write_demo(ckpt, 0, {**DEMO_CONFIG, **QWEN3_8B_LIKE})
    return ckpt


def _generic(path: str) -> str:
    """A module path with its layer and expert indices as ``*``."""
    import re

    return re.sub(r"\.\d+(?=\.|$)", ".*", path) or "(model)"


def torch_reductions(model, inputs) -> tuple[dict, dict]:
    """Run ``model(*inputs)`` and list what reduced: ({(torch op, module): calls} for every torch
    reduction executed outside a metrale op, order-sensitive and order-free alike (the op name tells
    which: ``ORDER_SENSITIVE``), {metrale op: calls}). Torch's dispatch sees each metrale op as one
    call (its CUDA kernel), the bodies of higher-order ops (the GDN's ``scan``) op by op."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode

    from metrale_export import contract

    stack = ["(model)"]
    hooks = []
    def enter(m, a, n):
        stack.append(_generic(n))

    def leave(m, a, o):  # returns None: the output stays the module's
        stack.pop()

    for name, mod in model.named_modules():
        hooks.append(mod.register_forward_pre_hook(lambda m, a, n=name: enter(m, a, n)))
        hooks.append(mod.register_forward_hook(leave))
    torch_ops, metrale_ops = Counter(), Counter()

    class Audit(TorchDispatchMode):
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if isinstance(func, torch._ops.HigherOrderOperator):
                if args and callable(args[0]):  # the body runs under the audit too
                    body, mode = args[0], self

                    def audited(*a, **k):
                        with mode:
                            return body(*a, **k)
                    args = (audited, *args[1:])
                return func(*args, **(kwargs or {}))
            op = func.overloadpacket.__name__
            if func.namespace == contract.DOMAIN:
                metrale_ops[op] += 1
            elif op in ORDER_SENSITIVE or op in ORDER_FREE:
                torch_ops[(op, stack[-1])] += 1
            return func(*args, **(kwargs or {}))

    try:
        with torch.no_grad(), Audit():
            model(*inputs)
    finally:
        for h in hooks:
            h.remove()
        # scan compiles its body; what it compiled under the audit must not serve later calls (a
        # later eager scan failed in dynamo otherwise: "torch.* op returned non-Tensor").
        torch._dynamo.reset()
    return dict(torch_ops), dict(metrale_ops)


def _summary(rows, key) -> tuple[int, int, list[str]]:
    """(outputs x cases identical, of how many, a few of the differing ones)."""
    bad = [key(r) for r in rows if not r.ok]
    return len(rows) - len(bad), len(rows), bad[:4]


def whole_model_checks(model, name: str, fmt: str) -> tuple[list[str], list[str], int]:
    """Issue 19's cases on ``model`` (any device): (the summary table's line, detail lines of every
    difference and torch reduction, the number of failures). A failure: any output of (a), (b) or
    (c) (the GDN ops run the recurrent form, so chunking changes no bit of them either), any
    order-sensitive torch reduction outside the modules listed as not yet covered (none now)."""
    from metrale_export.compare.row_invariance import chunk_invariance, decode_inputs, row_invariance, run_to_run

    details, failures = [], 0
    dec = row_invariance(model, list(DECODE_BATCHES), past=DECODE_PAST, seed=1)
    pre = row_invariance(model, list(PREFILL_BATCHES), past=PREFILL_PAST, seed=2, seq=PREFILL_SEQ)
    cells = []
    for what, rows in (("decode", dec), ("prefill", pre)):
        ok, total, bad = _summary(rows, lambda r: f"{r.output} @ batch {r.batch}: {r.identical}/{r.total} rows "
                                                  f"(max |diff| {r.max_abs_diff:.2e})")
        failures += total - ok
        cells.append(f"{ok}/{total}")
        details += [f"- {name} {fmt} (a) {what}: {b}" for b in bad]
    chunk_rows = chunk_invariance(model, CHUNK_TOKENS, list(CHUNKS), seed=3)
    for c in CHUNKS:
        rows = [r for r in chunk_rows if r.chunk == c]
        logits = rows[0]
        states = rows[1:]
        same_states = sum(r.ok for r in states)
        cells.append(f"{logits.identical}/{logits.total} tok, {same_states}/{len(states)} states")
        bad = [r for r in rows if not r.ok]
        failures += len(bad)
        details += [f"- {name} {fmt} (b) chunks of {c}: {r.output} {r.identical}/{r.total} identical "
                    f"(max |diff| {r.max_abs_diff:.2e})" for r in bad]
    # (c) the largest batches and a chunked prefill, twice each.
    seqs = decode_inputs(model, max(DECODE_BATCHES), DECODE_PAST, 1, next(model.buffers()).device)
    batch = [torch.cat([q[j] for q in seqs], dim=0) for j in range(len(seqs[0]))]
    seqs_p = decode_inputs(model, max(PREFILL_BATCHES), PREFILL_PAST, 2, batch[0].device, PREFILL_SEQ)
    batch_p = [torch.cat([q[j] for q in seqs_p], dim=0) for j in range(len(seqs_p[0]))]
    from metrale_export.compare.row_invariance import run_chunked

    ids = torch.randint(0, model.cfg.vocab_size, (1, CHUNK_TOKENS), generator=torch.Generator().manual_seed(3))
    ids = ids.to(batch[0].device)
    r2r = (run_to_run(lambda: model(*batch)) + run_to_run(lambda: model(*batch_p))
           + run_to_run(lambda: (lambda lg, st: (lg, *st))(*run_chunked(model, ids, 7))))
    r2r_bad = sum(not ok for _, ok in r2r)
    failures += r2r_bad
    cells.append(f"{len(r2r) - r2r_bad}/{len(r2r)}")
    if r2r_bad:
        details.append(f"- {name} {fmt} (c): {r2r_bad} of {len(r2r)} outputs differ run to run")
    # Torch reductions in a decode and a prefill call (batch 2).
    found: dict = {}
    metrale: dict = {}
    for inputs in ([t[:2] for t in batch], [t[:2] for t in batch_p]):
        t_ops, m_ops = torch_reductions(model, inputs)
        for k, v in t_ops.items():
            found[k] = found.get(k, 0) + v
        for k, v in m_ops.items():
            metrale[k] = metrale.get(k, 0) + v
    sensitive = {k: v for k, v in found.items() if k[0] in ORDER_SENSITIVE}
    uncovered = {k: v for k, v in sensitive.items() if not k[1].startswith(NOT_COVERED)}
    failures += len(uncovered)
    cells.append("none" if not sensitive else ", ".join(sorted({f"{op} ({mod})" for op, mod in sensitive})))
    details += [f"- {name} {fmt}: torch {op} x{n} in {mod}" + ("" if mod.startswith(NOT_COVERED) else " (NOT expected)")
                for (op, mod), n in sorted(found.items())]
    details.append(f"- {name} {fmt}: metrale ops in the two calls: "
                   + ", ".join(f"{k} x{v}" for k, v in sorted(metrale.items())))
    line = f"| {name} | {fmt} | " + " | ".join(cells) + f" | {'yes' if not failures else 'NO'} |"
    return [line], details, failures


# Modules whose torch reductions are known and not yet metrale ops, listed in the report as not
# covered: none since the Gated DeltaNet conv and recurrence are metrale ops (CausalConv1d,
# GatedDeltaRule) and in_proj_ba a FloatProj (issue 19).
NOT_COVERED: tuple[str, ...] = ()
WHOLE_HEAD = ["| model | format | (a) decode: outputs x batches 1..64 identical | (a) prefill (16 tokens) | "
              "(b) chunks of 64 vs one | (b) chunks of 7 | (b) chunks of 1 (decode) | (c) run to run: outputs | "
              "order-sensitive torch reductions (module) | ok |", "|---|---|---|---|---|---|---|---|---|---|"]


@contextlib.contextmanager
def _w8a8_mma(value: str | None):
    """METRALE_W8A8_MMA set to ``value`` (None: unset, the default FP8 tensor core) for the block."""
    before = os.environ.pop(W8A8_MMA, None)
    if value is not None:
        os.environ[W8A8_MMA] = value
    try:
        yield
    finally:
        os.environ.pop(W8A8_MMA, None)
        if before is not None:
            os.environ[W8A8_MMA] = before


def gpu(root: Path, out: Path, cases: list[str] = ()) -> int:
    import metrale_export.ops.cuda  # noqa: F401  (registers the CUDA kernels)
    from metrale_export.compare.row_invariance import row_invariance

    pairs = [tuple(c.split(":")) for c in cases] or [(n, f) for n in (*MODELS, BIG) for f in FORMATS]
    refs = np.load(root / "ort_reference.npz")
    lines = ["| model | format | case | rel. error vs ONNX Runtime | bound | projections vs CPU reference op "
             f"on the GPU's inputs, noise units (bound {NOISE_UNITS:g}; worst) | ok |", "|---|---|---|---|---|---|---|"]
    inv_lines = ["| model | format | output | batch | identical rows | max abs diff |", "|---|---|---|---|---|---|"]
    failures = 0
    for name, fmt in ((n, f) for n, f in pairs if n in MODELS):
        model = build_model(demo_checkpoint(root, name), fmt, "cuda")
        stale = stale_weights(model, root / f"onnx_{name}_{fmt}" / "model.onnx")
        if stale:
            print(f"error: {name}/{fmt}: {len(stale)} tensors (e.g. {stale[0]}) differ from the prepared export: "
                  f"the references were prepared by another quantizer; run `python -m benchmarks.model_check "
                  f"prepare` again at this commit", file=sys.stderr)
            return 2
        for case in CASES:
            inputs = [t.cuda() for t in model_inputs(model, case)]
            # W8A8: the exact path against the exact-products bounds, then the default FP8 tensor core.
            paths = [("", None, True)] if fmt != "w8a8" else [
                (" (exact products)", "exact", True), (" (FP8 tensor core, the default)", None, False)]
            for label, mma, bounded in paths:
                with _w8a8_mma(mma):
                    with torch.no_grad():
                        logits = model(*inputs)[0].float().cpu().numpy()
                    noise, where = projection_noise(model, inputs)
                ref = refs[f"{name}/{fmt}/{case}"]
                err = float(np.linalg.norm(logits - ref) / np.linalg.norm(ref))
                bound = _model_bound(fmt, len(model.layer_ids))
                noise_bound = NOISE_UNITS if bounded else FP8_NOISE_UNITS
                ok = (err < bound or not bounded) and noise <= noise_bound
                failures += not ok
                bound_cell = f"{bound:.0e}" if bounded else "-"
                noise_cell = f"{noise:.2f} ({where}" + ("" if bounded else f"; bound {noise_bound:.0f}") + ")"
                lines.append(f"| {name} | {fmt} | {case}{label} | {err:.3e} | {bound_cell} | {noise_cell} | "
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
                inv_lines.append(f"| {name} | {fmt} | {r.output} | {r.batch} | {r.identical}/{r.total} | {r.max_abs_diff:.3e} |")
            failures += (not r.ok) and r.output == "logits"
    whole, details, w_fail = whole_models(root, pairs)
    failures += w_fail
    text = "\n".join(["## Demo models (dense; MoE; hybrid GDN + attention + MoE) on the GPU through the CUDA ops", "", *lines, "",
                      "## Row invariance (decode rows alone vs in a batch; logits, and any output that differs)",
                      "", *inv_lines, "", *whole_text(whole, details)])
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_check.md").write_text(text)
    return 1 if failures else 0


def whole_models(root: Path, cases: list[tuple[str, str]]) -> tuple[list[str], list[str], int]:
    """``whole_model_checks`` of each (model, format) on the GPU: (table lines, details, failures)."""
    import metrale_export.ops.cuda  # noqa: F401  (registers the CUDA kernels)

    whole, details, failures = [], [], 0
    for name, fmt in cases:
        ckpt = write_big(root) if name == BIG else demo_checkpoint(root, name)
        # The 8B-like model rounds to nearest: NVFP4's scale search takes minutes on a CPU at
        # these sizes, and the check is of the kernels' invariance, not of the scales.
        model = build_model(ckpt, fmt, "cuda", scale_search=name != BIG)
        w_lines, w_details, w_fail = whole_model_checks(model, name, fmt)
        print(w_lines[0], *w_details, sep="\n", flush=True)
        whole += w_lines
        details += w_details
        failures += w_fail
        del model
        torch.cuda.empty_cache()
    return whole, details, failures


def whole_text(whole: list[str], details: list[str]) -> list[str]:
    """The whole-model section of the report."""
    return [f"## Whole model (issue 19): a sequence's logits and states bitwise, {BIG} = "
            + ", ".join(f"{k} {v}" for k, v in QWEN3_8B_LIKE.items()), "",
            f"(a) rows alone vs in a batch: decode past {DECODE_PAST}, batches {DECODE_BATCHES[0]}.."
            f"{DECODE_BATCHES[-1]}; prefill {PREFILL_SEQ} tokens after a past of {PREFILL_PAST}, batches "
            f"{', '.join(map(str, PREFILL_BATCHES))}; each cell counts (output, batch) pairs whose every row "
            f"is bitwise the row alone. (b) one sequence of {CHUNK_TOKENS} tokens from an empty state, "
            f"chunks vs one chunk: tokens whose logits are identical, final states (KV cache, GDN) identical. "
            "(c) the batch-64 decode, the batch-64 prefill and the 7-token-chunk prefill, each twice: "
            "outputs identical. Torch reductions: those a decode and a prefill call execute outside the "
            "metrale ops" + (f"; {', '.join(NOT_COVERED)} is not covered yet" if NOT_COVERED else
                             " (none is expected: every reduction is a metrale op)") + ".",
            "", *WHOLE_HEAD, *whole, "", "Details:", "", *details, ""]


def whole_only(root: Path, out: Path, cases: list[str]) -> int:
    """The whole-model section alone (no ONNX Runtime references needed), for ``cases``
    ("model:format", default every model and format): a shorter device call."""
    pairs = [tuple(c.split(":")) for c in cases] or [(n, f) for n in (*MODELS, BIG) for f in FORMATS]
    whole, details, failures = whole_models(root, pairs)
    text = "\n".join(whole_text(whole, details))
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "model_check_whole.md").write_text(text)
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(Path(sys.argv[2]))
    elif sys.argv[1] == "whole":
        sys.exit(whole_only(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
    else:
        sys.exit(gpu(Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4:]))
