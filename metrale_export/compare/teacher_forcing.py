"""Teacher-forced checks: every metrale op and every decoder layer of the PyTorch model run on the
inputs ONNX Runtime gave that op or layer, and their outputs are compared with ONNX Runtime's.

Because each piece starts from the other runtime's own input, an error of one piece cannot reach
the next: a projection is held to the per-op bound and a layer to the per-layer bound whatever the
depth (docs/ops.md, *Tolerances*). The PyTorch side is built from the checkpoint, so a wrong weight,
scale or attribute in the export shows in the op that reads it.

Invariants: torch.no_grad, CPU, float64 metrics; ``values`` are ONNX Runtime's outputs of the
verification graph (taps.GraphTaps.values() exposed); nothing here raises for a mismatch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..ops import tolerances
from .metrics import rel_error
from .taps import GraphTaps


class _Bounded:
    """A checked row (its ``rel_error`` and ``bound`` fields): ok when finite and within the bound."""

    @property
    def ok(self) -> bool:
        return bool(np.isfinite(self.rel_error)) and self.rel_error <= self.bound

    def as_dict(self) -> dict:
        return asdict(self) | {"ok": self.ok}


@dataclass
class OpRow(_Bounded):
    case: str
    layer: int | None  # None: outside the decoder layers (lm_head)
    projection: str
    op_type: str
    activation_format: str
    rel_error: float
    bound: float


@dataclass
class LayerRow(_Bounded):
    case: str
    layer: int
    output: str  # "residual" (the layer's update of the stream) or a state output's name
    rel_error: float
    bound: float


def layer_formats(taps: GraphTaps) -> dict[int | None, set[str]]:
    """The roundings of the metrale ops of each layer: the projections' activation formats, and the
    operand rounding of the other ops that round (tolerances.OPERAND_ROUNDING)."""
    out: dict[int | None, set[str]] = {}
    for t in taps.ops:
        fmt = t.activation_format or tolerances.OPERAND_ROUNDING.get(t.op_type)
        if fmt:  # the norms, router and float projection round nothing
            out.setdefault(t.layer, set()).add(fmt)
    return out


def _output_error(got: np.ndarray, ref: np.ndarray) -> float:
    """rel_error for float outputs; integer outputs (the router's ids) must be equal (else inf)."""
    if not np.issubdtype(np.asarray(got).dtype, np.floating):
        return 0.0 if np.array_equal(got, ref) else float("inf")
    return rel_error(got, ref)


def _op_modules(model) -> dict:
    """Projection and GroupedProjection modules by the checkpoint name their node carries, and the
    modules of the other metrale ops (norms, router, float gates) by their op_name."""
    modules = {m.spec.name: m for _, m in model.named_modules()
               if isinstance(getattr(getattr(m, "spec", None), "name", None), str)}
    modules.update({m.op_name: m for _, m in model.named_modules() if getattr(m, "op_name", "")})
    return modules


def _op_error(model, module, values: dict, inputs, outputs) -> float:
    """The worst output error of ``module`` run on ONNX Runtime's ``inputs`` against its ``outputs``."""
    args = [torch.from_numpy(np.ascontiguousarray(values[v])) for v in inputs]
    # A float32 value stays float32 (the GDN states are float32 whatever the model dtype).
    args = [a.to(model.dtype) if a.is_floating_point() and a.dtype != torch.float32 else a for a in args]
    ref = module(*args)
    refs = ref if isinstance(ref, tuple) else (ref,)
    return max(_output_error(values[v], (r.float() if r.is_floating_point() else r).numpy())
               for v, r in zip(outputs, refs))


@torch.no_grad()
def check_ops(model, taps: GraphTaps, values: dict, case: str) -> list[OpRow]:
    modules = _op_modules(model)
    rows = []
    for t in taps.ops:
        bound = tolerances.op_bound(t.activation_format, t.op_type)
        module = modules.get(t.projection)
        inputs = t.inputs or (t.x,)
        outputs = t.outputs or (t.y,)
        if module is None or any(v not in values for v in (*inputs, *outputs)):
            rows.append(OpRow(case, t.layer, t.projection or t.node, t.op_type, t.activation_format,
                              float("inf"), bound))
            continue
        err = _op_error(model, module, values, inputs, outputs)
        rows.append(OpRow(case, t.layer, t.projection, t.op_type, t.activation_format, err, bound))
    return rows


def _new_part(spec, got: np.ndarray, ref: np.ndarray, past: int):
    """The part of a state output the layer computed: for a cache growing along ``past``, the
    appended positions; otherwise all of it."""
    if "past" in spec.shape and past:
        axis = spec.shape.index("past")
        sl = [slice(None)] * ref.ndim
        sl[axis] = slice(past, None)
        return got[tuple(sl)], ref[tuple(sl)]
    return got, ref


@torch.no_grad()
def check_layers(model, taps: GraphTaps, values: dict, feed: dict, case: str, past: int) -> list[LayerRow]:
    formats = layer_formats(taps)
    pos = torch.from_numpy(feed["position_ids"])
    cos, sin = model.model.rotary_emb(pos, model.dtype)
    rows = []
    for i, tap in taps.layers.items():
        if str(i) not in model.model.layers or tap.x_in not in values or tap.x_out not in values:
            continue
        bound = tolerances.teacher_forced_layer_bound(formats.get(i, set()))
        x_in = values[tap.x_in]
        specs = model.states[i]
        states = [torch.from_numpy(np.ascontiguousarray(feed[f"{s.name}.{i}"])) for s in specs]
        out, *new = model.model.layers[str(i)](torch.from_numpy(np.ascontiguousarray(x_in)), cos, sin, *states)
        rows.append(LayerRow(case, i, "residual", rel_error(values[tap.x_out], out.float().numpy(), base=x_in),
                             bound))
        for spec, t in zip(specs, new):
            name = f"{spec.output}.{i}"
            if name in values:
                got, ref = _new_part(spec, np.asarray(values[name]), t.float().numpy(), past)
                rows.append(LayerRow(case, i, name, rel_error(got, ref), bound))
    return rows
