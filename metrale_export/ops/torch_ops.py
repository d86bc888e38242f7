"""The metrale ops as torch custom ops (torch.library), namespace ``metrale``, one per ``contract``
spec.

Each op has a CPU implementation (the reference of docs/ops.md, from the per-format modules) and a
fake implementation for tracing; ``metrale_export.ops.cuda`` registers the CUDA implementation
that calls the plugin kernels, and ``metrale_export.ops.onnx_translation`` maps each op to its
``metrale`` ONNX node. Invariants: an op's arguments are x, the contract's inputs (optional ones
``None`` when absent), then its attributes but the has_* gates, in contract order
(``OpSpec.torch_attributes``); ``reference`` is the one place that maps them to the per-format
references, for the torch ops and the ONNX Runtime ops alike. An op of one output returns a Tensor,
an op of several a tuple of every output (``OpSpec.outputs``; an absent optional one is a copy of
the input its ``absent`` names), shaped by the contract's expressions (``output_shape``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import contract
from . import attention as attention_ref, float_proj as float_proj_ref, gdn, moe, norms, router as router_ref, w4a4, w4a16, w8a8

_TORCH_TYPES = {"int": "SymInt", "float": "float", "string": "str"}

# op type -> the per-format reference, called with x, the inputs by name and the attributes by name.
_REFERENCES = {
    "W4A16Proj": lambda x, t, a: w4a16.proj(x, t["weight"], t["weight_scale"], t.get("zero_point"), t.get("bias"),
                                            int(a["group_size"]), a["activation_format"]),
    "W8A8Proj": lambda x, t, a: w8a8.proj(x, t["weight"], t["weight_scale"], t.get("bias"),
                                          a["weight_scale_granularity"], a["activation_format"],
                                          a["activation_scale_granularity"], t.get("input_scale")),
    "W4A4Proj": lambda x, t, a: w4a4.proj(x, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                          t.get("input_scale"), t.get("bias"), a["activation_format"]),
}
# The non-projection ops (docs/ops.md, "Norms, float projections and the router").
_REFERENCES.update({
    "RMSNorm": lambda x, t, a: norms.rms_norm(x, t["weight"], t.get("residual"), t.get("gate"), float(a["epsilon"]),
                                              int(a["weight_offset"])),
    "FloatProj": lambda x, t, a: float_proj_ref.proj(x, t["weight"], t.get("bias")),
    "Router": lambda x, t, a: router_ref.route(x, int(a["top_k"]), int(a["normalize"])),
})
# Attention (docs/ops.md, "Attention"; reference in ops/attention.py).
_REFERENCES["Attention"] = lambda x, t, a: attention_ref.attention_reference(x, t["key"], t["value"], float(a["scale"]))
# Gated DeltaNet (docs/ops.md, "Gated DeltaNet"; reference in ops/gdn.py).
_REFERENCES["CausalConv1d"] = lambda x, t, a: gdn.causal_conv1d(x, t["weight"], t["conv_state"])
_REFERENCES["GatedDeltaRule"] = lambda x, t, a: gdn.gated_delta_rule(
    x, t["ba"], t["A_log"], t["dt_bias"], t["state"], int(a["num_k_heads"]), int(a["num_v_heads"]),
    int(a["head_k_dim"]), int(a["head_v_dim"]))
# The grouped-expert ops (docs/ops.md, "Grouped-expert ops"; reference in ops/moe.py).
for _t, _spec in contract.OPS.items():
    if _spec.grouped_of is not None:
        _REFERENCES[_t] = (lambda op_type: lambda x, t, a: moe.moe_proj(
            op_type, x, t.pop("topk_ids"), t.pop("topk_weights", None), t, a))(_t)


def reference(op_type: str, x: Tensor, inputs: dict, attrs: dict) -> Tensor:
    """The CPU reference of ``op_type`` (docs/ops.md); absent optional inputs are missing or None,
    absent attributes take the contract's defaults."""
    spec = contract.op(op_type)
    if op_type not in _REFERENCES:
        raise NotImplementedError(f"{op_type}: the contract defines it, but it has no reference here")
    return _REFERENCES[op_type](x, {k: v for k, v in inputs.items() if v is not None}, {**spec.defaults(), **attrs})


def schema(spec: contract.OpSpec) -> str:
    """The torch schema of ``metrale::<spec.torch_name>``."""
    args = ["Tensor x"] + [f"Tensor{'?' if spec.input(i).optional else ''} {i}" for i in spec.torch_inputs]
    args += [f"{_TORCH_TYPES[spec.attribute(a).type]} {a}" for a in spec.torch_attributes]
    out = "Tensor" if len(spec.outputs) == 1 else f"({', '.join('Tensor' for _ in spec.outputs)})"
    return f"({', '.join(args)}) -> {out}"


_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                 "int8": torch.int8, "int32": torch.int32}


def output_shape(spec: contract.OpSpec, output: contract.Output, x: Tensor, attrs: dict) -> tuple:
    """The shape of ``output`` for x and the attributes: "m" is x's rows, "..." x's leading
    dimensions (all but the last), "x.<i>" x's dimension i, other names attributes."""
    dims: list = []
    for d in output.shape:
        if d == "...":
            dims.extend(x.shape[:-1])
        else:
            dims.append(x.shape[0] if d == "m" else x.shape[int(d[2:])] if d.startswith("x.") else dimension(d, attrs))
    return tuple(dims)


def dimension(expr: str, attrs: dict) -> int:
    """An attribute (``channels``), or a product or difference of one with an integer
    (``2*num_v_heads``, ``kernel_size-1``): the contract's shape expressions of a dimension."""
    if expr in attrs:
        return int(attrs[expr])
    for sep in ("*", "-"):
        left, found, right = expr.partition(sep)
        if found:
            lv, rv = (int(p) if p.isdigit() else int(attrs[p]) for p in (left, right))
            return lv * rv if sep == "*" else lv - rv
    raise KeyError(f"shape expression {expr!r}: not an attribute of {sorted(attrs)}")


def output_dtype(output: contract.Output, x: Tensor) -> torch.dtype:
    return x.dtype if output.dtype == "x" else _TORCH_DTYPES[output.dtype]


def _define(spec: contract.OpSpec):
    names = list(spec.torch_inputs)

    def impl(x, *args):
        inputs = dict(zip(names, args))
        attrs = dict(zip(spec.torch_attributes, args[len(names):]))
        out = reference(spec.op_type, x, inputs, attrs)
        if isinstance(out, tuple):  # a custom op's outputs may not alias its inputs
            given = [x, *args]
            out = tuple(o.clone() if any(o is g for g in given) else o for o in out)
        return out

    def fake(x, *args):
        a = dict(zip(spec.torch_attributes, args[len(names):]))
        if spec.grouped_of is not None and not a["combine"]:
            return x.new_empty((x.shape[0], a["top_k"], a["n"]))
        outs = tuple(x.new_empty(output_shape(spec, o, x, a), dtype=output_dtype(o, x)) for o in spec.outputs)
        return outs[0] if len(outs) == 1 else outs

    op = torch.library.custom_op(f"metrale::{spec.torch_name}", impl, mutates_args=(), schema=schema(spec))
    op.register_fake(fake)
    return op


OPS = {spec.op_type: _define(spec) for spec in contract.OPS.values()}  # op type -> torch.ops.metrale.<torch_name>
