"""The metrale projection ops as torch custom ops (torch.library), namespace ``metrale``, one per
``contract`` spec.

Each op has a CPU implementation (the reference of docs/ops.md, from the per-format modules) and a
fake implementation for tracing; ``metrale_export.ops.cuda`` registers the CUDA implementation
that calls the plugin kernels, and ``metrale_export.ops.onnx_translation`` maps each op to its
``metrale`` ONNX node. Invariants: an op's arguments are x, the contract's inputs (optional ones
``None`` when absent), then its attributes but the has_* gates, in contract order
(``OpSpec.torch_attributes``); ``reference`` is the one place that maps them to the per-format
references, for the torch ops and the ONNX Runtime ops alike.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import contract
from . import moe, w4a4, w4a16, w8a8

_TORCH_TYPES = {"int": "SymInt", "string": "str"}

# op type -> the per-format reference, called with x, the inputs by name and the attributes by name.
_REFERENCES = {
    "W4A16Proj": lambda x, t, a: w4a16.proj(x, t["weight"], t["weight_scale"], t.get("zero_point"), t.get("bias"),
                                            int(a["group_size"]), a["activation_format"]),
    "W8A8Proj": lambda x, t, a: w8a8.proj(x, t["weight"], t["weight_scale"], t.get("bias"),
                                          a["weight_scale_granularity"], a["activation_format"],
                                          a["activation_scale_granularity"]),
    "W4A4Proj": lambda x, t, a: w4a4.proj(x, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                          t.get("input_scale"), t.get("bias"), a["activation_format"]),
}
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
    return f"({', '.join(args)}) -> Tensor"


def _define(spec: contract.OpSpec):
    names = list(spec.torch_inputs)

    def impl(x, *args):
        inputs = dict(zip(names, args))
        attrs = dict(zip(spec.torch_attributes, args[len(names):]))
        return reference(spec.op_type, x, inputs, attrs)

    def fake(x, *args):
        a = dict(zip(spec.torch_attributes, args[len(names):]))
        if spec.grouped_of is not None and not a["combine"]:
            return x.new_empty((x.shape[0], a["top_k"], a["n"]))
        return x.new_empty((x.shape[0], a["n"]))

    op = torch.library.custom_op(f"metrale::{spec.torch_name}", impl, mutates_args=(), schema=schema(spec))
    op.register_fake(fake)
    return op


OPS = {spec.op_type: _define(spec) for spec in contract.OPS.values()}
w4a16_proj = OPS["W4A16Proj"]
w8a8_proj = OPS["W8A8Proj"]
w4a4_proj = OPS["W4A4Proj"]
w4a16_moe_proj = OPS["W4A16MoEProj"]
w8a8_moe_proj = OPS["W8A8MoEProj"]
w4a4_moe_proj = OPS["W4A4MoEProj"]
