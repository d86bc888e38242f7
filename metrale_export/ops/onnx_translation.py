"""ONNX side of the metrale ops: op schemas (domain ``metrale``, per-op versions in ``versions``) and
the translation of each torch custom op into its node, for ``torch.onnx.export(dynamo=True)``.

The schemas declare optional inputs so tracing can emit one node shape; ``compact_inputs`` then
drops the absent ones, giving the contract's form (present inputs only, in order, with ``has_*``
attributes), which is what TensorRT's parser hands to the plugin. Invariants: the attributes emitted
here are exactly docs/ops.md's table, plus ``plugin_version`` on the nodes of an op whose version
is above 1 (TensorRT's parser finds the plugin creator by it; it is not a plugin field).
"""

from __future__ import annotations

import onnx
import onnxscript
import torch
from onnx.defs import OpSchema

from .versions import DOMAIN, DOMAIN_VERSION, OP_VERSIONS, names_plugin_version, plugin_version

VERSION = DOMAIN_VERSION  # the metrale opset an export imports
DENSE_OP_TYPES = ("W4A16Proj", "W8A8Proj", "W4A4Proj")
# The grouped-expert ops (docs/ops.md, "Grouped-expert ops"): x, topk_ids, the dense op's inputs
# with a leading expert axis, topk_weights; the dense op's attributes and the routing ones.
MOE_OP_TYPES = ("W4A16MoEProj", "W8A8MoEProj", "W4A4MoEProj")
OP_TYPES = DENSE_OP_TYPES + MOE_OP_TYPES
_MOE_DENSE = dict(zip(MOE_OP_TYPES, DENSE_OP_TYPES))
_MOE_INT_ATTRS = ("num_experts", "top_k", "combine")

_ACT_TYPES = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
_INPUTS = {
    "W4A16Proj": [("weight", "tensor(int8)", False), ("weight_scale", "tensor(bfloat16)", False),
                  ("zero_point", "tensor(int8)", True), ("bias", "tensor(float)", True)],
    "W8A8Proj": [("weight", "tensor(int8)", False), ("weight_scale", "tensor(float)", False),
                 ("bias", "tensor(float)", True)],
    "W4A4Proj": [("weight", "tensor(int8)", False), ("weight_scale", "tensor(int8)", False),
                 ("weight_global_scale", "tensor(float)", False), ("input_scale", "tensor(float)", True),
                 ("bias", "tensor(float)", True)],
}
_INT_ATTRS = {
    "W4A16Proj": ("n", "k", "group_size", "has_zero_point", "has_bias"),
    "W8A8Proj": ("n", "k", "has_bias"),
    "W4A4Proj": ("n", "k", "has_input_scale", "has_bias"),
}
_STR_ATTRS = {
    "W4A16Proj": ("activation_format", "family", "name"),
    "W8A8Proj": ("weight_scale_granularity", "activation_format", "activation_scale_granularity", "family", "name"),
    "W4A4Proj": ("activation_format", "family", "name"),
}

for _moe, _dense in _MOE_DENSE.items():
    # topk_weights (combine=1 only) last: ONNX schemas want the optional inputs after the required.
    _INPUTS[_moe] = [("topk_ids", "tensor(int32)", False)] + _INPUTS[_dense] + [("topk_weights", "T", True)]
    _INT_ATTRS[_moe] = _INT_ATTRS[_dense][:2] + _MOE_INT_ATTRS + _INT_ATTRS[_dense][2:]
    _STR_ATTRS[_moe] = _STR_ATTRS[_dense]
# An optional input whose presence another attribute than has_<name> states.
PRESENCE = {"topk_weights": "combine"}


def present_flag(name: str) -> str:
    """The attribute that says whether optional input ``name`` is present."""
    return PRESENCE.get(name, f"has_{name}")


def attribute_names(op_type: str) -> tuple[str, ...]:
    """The contract's attributes of ``op_type`` (docs/ops.md), which are also its plugin's fields."""
    return _INT_ATTRS[op_type] + _STR_ATTRS[op_type]


def node_attribute_names(op_type: str) -> tuple[str, ...]:
    """Every attribute a node of ``op_type`` carries: the contract's, and ``plugin_version`` on a
    plugin op whose version is above 1."""
    return attribute_names(op_type) + (("plugin_version",) if names_plugin_version(op_type) else ())


def _schema(op_type: str) -> OpSchema:
    version = OP_VERSIONS[op_type]
    fp = OpSchema.FormalParameter
    optional = OpSchema.FormalParameterOption.Optional
    inputs = [fp("x", "T")] + [
        fp(name, ty, param_option=optional) if opt else fp(name, ty) for name, ty, opt in _INPUTS[op_type]
    ]
    attrs = [OpSchema.Attribute(a, OpSchema.AttrType.INT, a) for a in _INT_ATTRS[op_type]]
    attrs += [OpSchema.Attribute(a, OpSchema.AttrType.STRING, a) for a in _STR_ATTRS[op_type]]
    if names_plugin_version(op_type):
        attrs.append(OpSchema.Attribute("plugin_version", OpSchema.AttrType.STRING,
                                        "the TensorRT plugin version (the op version)"))
    return OpSchema(op_type, DOMAIN, version, doc=f"metrale {op_type} version {version}: see docs/ops.md",
                    inputs=inputs, outputs=[fp("y", "T")],
                    type_constraints=[("T", _ACT_TYPES, "activation and output dtype")], attributes=attrs)


def register_schemas() -> None:
    """Register the three schemas with onnx once per process."""
    for op_type in OP_TYPES:
        try:
            onnx.defs.get_schema(op_type, OP_VERSIONS[op_type], DOMAIN)
        except onnx.defs.SchemaError:
            onnx.defs.register_schema(_schema(op_type))


register_schemas()
_opset = onnxscript.values.Opset(DOMAIN, VERSION)


def _w4a16(x, weight, weight_scale, zero_point, bias, n, k, group_size, activation_format, family, name):
    return _opset.W4A16Proj(
        x, weight, weight_scale, zero_point, bias, n=n, k=k, group_size=group_size,
        has_zero_point=int(zero_point is not None), has_bias=int(bias is not None),
        activation_format=activation_format, family=family, name=name,
        plugin_version=plugin_version("W4A16Proj"))


def _w8a8(x, weight, weight_scale, bias, n, k, weight_scale_granularity, activation_format,
          activation_scale_granularity, family, name):
    return _opset.W8A8Proj(
        x, weight, weight_scale, bias, n=n, k=k, has_bias=int(bias is not None),
        weight_scale_granularity=weight_scale_granularity, activation_format=activation_format,
        activation_scale_granularity=activation_scale_granularity, family=family, name=name)


def _w4a4(x, weight, weight_scale, weight_global_scale, input_scale, bias, n, k, activation_format,
          family, name):
    return _opset.W4A4Proj(
        x, weight, weight_scale, weight_global_scale, input_scale, bias, n=n, k=k,
        has_input_scale=int(input_scale is not None), has_bias=int(bias is not None),
        activation_format=activation_format, family=family, name=name)


def _w4a16_moe(x, topk_ids, topk_weights, weight, weight_scale, zero_point, bias, n, k, num_experts, top_k,
               combine, group_size, activation_format, family, name):
    return _opset.W4A16MoEProj(
        x, topk_ids, weight, weight_scale, zero_point, bias, topk_weights, n=n, k=k,
        num_experts=num_experts, top_k=top_k, combine=combine, group_size=group_size,
        has_zero_point=int(zero_point is not None), has_bias=int(bias is not None),
        activation_format=activation_format, family=family, name=name)


def _w8a8_moe(x, topk_ids, topk_weights, weight, weight_scale, bias, n, k, num_experts, top_k, combine,
              weight_scale_granularity, activation_format, activation_scale_granularity, family, name):
    return _opset.W8A8MoEProj(
        x, topk_ids, weight, weight_scale, bias, topk_weights, n=n, k=k, num_experts=num_experts,
        top_k=top_k, combine=combine, has_bias=int(bias is not None),
        weight_scale_granularity=weight_scale_granularity, activation_format=activation_format,
        activation_scale_granularity=activation_scale_granularity, family=family, name=name)


def _w4a4_moe(x, topk_ids, topk_weights, weight, weight_scale, weight_global_scale, input_scale, bias, n, k,
              num_experts, top_k, combine, activation_format, family, name):
    return _opset.W4A4MoEProj(
        x, topk_ids, weight, weight_scale, weight_global_scale, input_scale, bias, topk_weights, n=n, k=k,
        num_experts=num_experts, top_k=top_k, combine=combine,
        has_input_scale=int(input_scale is not None), has_bias=int(bias is not None),
        activation_format=activation_format, family=family, name=name)


def translation_table() -> dict:
    """custom_translation_table for torch.onnx.export."""
    from . import torch_ops  # noqa: F401

    return {
        torch.ops.metrale.w4a16_proj.default: _w4a16,
        torch.ops.metrale.w8a8_proj.default: _w8a8,
        torch.ops.metrale.w4a4_proj.default: _w4a4,
        torch.ops.metrale.w4a16_moe_proj.default: _w4a16_moe,
        torch.ops.metrale.w8a8_moe_proj.default: _w8a8_moe,
        torch.ops.metrale.w4a4_moe_proj.default: _w4a4_moe,
    }


def compact_inputs(graph: onnx.GraphProto) -> int:
    """Drop empty (absent optional) inputs of every metrale node; returns the nodes touched."""
    touched = 0
    for node in graph.node:
        if node.domain == DOMAIN and any(not i for i in node.input):
            kept = [i for i in node.input if i]
            del node.input[:]
            node.input.extend(kept)
            touched += 1
    return touched
