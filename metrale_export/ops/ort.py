"""Run an exported graph in ONNX Runtime on the CPU, with the metrale ops executed by their
reference implementations (docs/ops.md) through onnxruntime-extensions' Python custom ops.

onnxruntime-extensions serves Python ops only in its own domain (``ai.onnx.contrib``) and with a
fixed input list per op, so the session runs on a copy of the graph in which every metrale node is
moved to that domain and renamed to a variant naming its activation dtype and present optional
inputs (e.g. ``W4A16Proj__float__x_w_s_b``); each variant is registered once per process. Inputs of
a dtype the Python ops do not take (W4A16Proj's bfloat16 scales) reach them through a Cast to
float32, exact, and are narrowed back before the reference runs. The file on disk is never
modified; a graph of an older op contract is refused (``versions.check_model``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime_extensions import PyCustomOpDef, get_library_path, onnx_op

from ..errors import InputError
from . import onnx_translation as ot
from . import moe, versions, w4a4, w4a16, w8a8

CONTRIB = "ai.onnx.contrib"
_DT = {onnx.TensorProto.FLOAT: ("float", PyCustomOpDef.dt_float),
       onnx.TensorProto.FLOAT16: ("float16", PyCustomOpDef.dt_float16)}
# Contract input types the Python ops take widened (exactly) to float32, and their torch dtype.
_WIDENED = {"tensor(bfloat16)": torch.bfloat16}
_INPUT_DT = {"tensor(int8)": PyCustomOpDef.dt_int8, "tensor(float)": PyCustomOpDef.dt_float,
             "tensor(int32)": PyCustomOpDef.dt_int32, **{ty: PyCustomOpDef.dt_float for ty in _WIDENED}}
_registered: set[str] = set()


def _impl(op_type: str, present: list[str]):
    """A numpy-in, numpy-out function running the reference of ``op_type``."""

    def run(x, *rest, **attrs):
        t = dict(zip(present, (torch.from_numpy(np.ascontiguousarray(a)) for a in rest)))
        for name, ty, _ in ot._INPUTS[op_type]:
            if ty in _WIDENED and name in t:
                t[name] = t[name].to(_WIDENED[ty])  # back from the exact float32 Cast
        xt = torch.from_numpy(np.ascontiguousarray(x))
        if op_type in moe.OP_TYPES:
            y = moe.moe_proj(op_type, xt, t.pop("topk_ids"), t.pop("topk_weights", None), t, attrs)
        elif op_type == "W4A16Proj":
            y = w4a16.proj(xt, t["weight"], t["weight_scale"], t.get("zero_point"), t.get("bias"),
                           int(attrs["group_size"]), attrs["activation_format"])
        elif op_type == "W8A8Proj":
            y = w8a8.proj(xt, t["weight"], t["weight_scale"], t.get("bias"),
                          attrs["weight_scale_granularity"], attrs["activation_format"],
                          attrs["activation_scale_granularity"])
        else:
            y = w4a4.proj(xt, t["weight"], t["weight_scale"], t["weight_global_scale"],
                          t.get("input_scale"), t.get("bias"), attrs["activation_format"])
        return y.numpy()

    return run


def _variant(op_type: str, x_type: int, has: dict[str, bool]) -> str:
    if x_type not in _DT:
        name = onnx.TensorProto.DataType.Name(x_type)
        raise InputError(
            f"{op_type}: the ONNX Runtime reference runs float32 or float16 activations, found {name}; "
            "export with --dtype float32 to verify on the CPU"
        )
    present = [name for name, _, opt in ot._INPUTS[op_type] if not opt or has[name]]
    tag = "_".join("".join(w[0] for w in p.split("_")) for p in present)
    name = f"{op_type}__{_DT[x_type][0]}__{tag}"
    if name not in _registered:
        types = dict((n, ty) for n, ty, _ in ot._INPUTS[op_type])
        attrs = {a: PyCustomOpDef.dt_int64 for a in ot._INT_ATTRS[op_type]}
        attrs.update({a: PyCustomOpDef.dt_string for a in ot._STR_ATTRS[op_type]})
        dts = {**_INPUT_DT, "T": _DT[x_type][1]}  # "T": the dtype of x
        onnx_op(op_type=name, domain=CONTRIB,
                inputs=[_DT[x_type][1]] + [dts[types[p]] for p in present],
                outputs=[_DT[x_type][1]], attrs=attrs)(_impl(op_type, present))
        _registered.add(name)
    return name


def _register_all() -> None:
    """Register every variant up front: registering a Python op after a session was created with
    the extensions library crashes the process (seen with onnxruntime-extensions 0.15.2)."""
    import itertools

    for op_type in ot.OP_TYPES:
        optional = [name for name, _, opt in ot._INPUTS[op_type] if opt]
        for x_type in _DT:
            for bits in itertools.product((False, True), repeat=len(optional)):
                _variant(op_type, x_type, dict(zip(optional, bits)))


_register_all()


def _value_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {}
    for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
        if v.type.tensor_type.elem_type:
            types[v.name] = v.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    return types


def to_reference_graph(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose metrale nodes run as onnxruntime-extensions Python ops."""
    versions.check_model(model, "the ONNX Runtime reference")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    types = _value_types(out)
    float_inputs = [v.type.tensor_type.elem_type for v in out.graph.input
                    if v.type.tensor_type.elem_type in _DT]
    fallback = float_inputs[0] if float_inputs else onnx.TensorProto.FLOAT
    nodes = []
    for original in out.graph.node:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        if node.domain != ot.DOMAIN:
            nodes.append(node)
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        flags = {name: bool(attrs.get(ot.present_flag(name), 0)) for name, _, opt in ot._INPUTS[node.op_type] if opt}
        present = [(name, ty) for name, ty, opt in ot._INPUTS[node.op_type] if not opt or flags[name]]
        for i, (name, ty) in enumerate(present, start=1):
            if ty in _WIDENED and i < len(node.input):
                wide = f"{node.input[i]}__float32"
                nodes.append(onnx.helper.make_node("Cast", [node.input[i]], [wide], to=onnx.TensorProto.FLOAT,
                                                   name=f"{node.name}__cast_{name}"))
                node.input[i] = wide
        node.op_type = _variant(node.op_type, types.get(node.input[0], fallback), flags)
        node.domain = CONTRIB
        for i in reversed(range(len(node.attribute))):
            if node.attribute[i].name == "plugin_version":  # TensorRT's, not the Python op's
                del node.attribute[i]
        nodes.append(node)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    kept = [o for o in out.opset_import if o.domain != ot.DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(kept + [onnx.helper.make_opsetid(CONTRIB, 1)])
    return out


def reference_session(model: str | Path | onnx.ModelProto, threads: int | None = None) -> ort.InferenceSession:
    """An ONNX Runtime CPU session of ``model`` with the metrale reference ops."""
    proto = onnx.load(str(model)) if not isinstance(model, onnx.ModelProto) else model
    ref = to_reference_graph(proto)
    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(ref.SerializeToString(), so, providers=["CPUExecutionProvider"])
