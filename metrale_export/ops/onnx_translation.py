"""ONNX side of the metrale ops: op schemas (domain ``metrale``) and the translation of each torch
custom op into its node, for ``torch.onnx.export(dynamo=True)``, all derived from ``contract``.

The schemas declare optional inputs so tracing can emit one node shape; ``compact_inputs`` then
drops the absent ones, giving the contract's form (present inputs only, in order, with ``has_*``
attributes), which is what TensorRT's parser hands to the plugin. Invariants: a node carries
exactly the contract's attributes (``OpSpec.emitted_attributes`` order), each schema has its op's
own version as since_version; a node of a plugin op above version 1 also carries ``plugin_version``
(its ``node_version`` as a string, which TensorRT's parser finds the plugin creator by; not a
plugin field; a W8A8MoEProj node without a static activation scale is a version-1 node and has none).
"""

from __future__ import annotations

import inspect

import onnx
import onnxscript
import torch
from onnx.defs import OpSchema

from .. import contract, onnx_nodes

DOMAIN = contract.DOMAIN

# "x": the input has x's dtype (type constraint T).
_ONNX_TYPES = {"float32": "tensor(float)", "float16": "tensor(float16)", "bfloat16": "tensor(bfloat16)",
               "int8": "tensor(int8)", "int32": "tensor(int32)", "x": "T"}
_ACT_TYPES = [_ONNX_TYPES[t] for t in contract.X_DTYPES]
_ATTR_TYPES = {"int": OpSchema.AttrType.INT, "float": OpSchema.AttrType.FLOAT, "string": OpSchema.AttrType.STRING}


def attribute_names(op_type: str) -> tuple[str, ...]:
    """The contract's attributes a node of ``op_type`` carries, in the order an export writes them."""
    return contract.op(op_type).emitted_attributes


def node_attribute_names(op_type: str) -> tuple[str, ...]:
    """Every attribute a node of ``op_type`` carries: the contract's, and ``plugin_version``."""
    spec = contract.op(op_type)
    return spec.emitted_attributes + (("plugin_version",) if contract.names_plugin_version(spec) else ())


def onnx_type(dtype: str) -> str:
    """A contract dtype ("int8", "float32", ...) as an ONNX type string."""
    if dtype not in _ONNX_TYPES:
        raise KeyError(f"contract dtype {dtype!r} has no ONNX type here; known: {', '.join(_ONNX_TYPES)}")
    return _ONNX_TYPES[dtype]


def _schema(spec: contract.OpSpec) -> OpSchema:
    fp = OpSchema.FormalParameter
    optional = OpSchema.FormalParameterOption.Optional
    inputs = [fp(spec.x_name, "T")] + [
        fp(i.name, onnx_type(i.dtype), param_option=optional) if i.optional else fp(i.name, onnx_type(i.dtype))
        for i in spec.inputs
    ]
    outputs = [fp(o.name, onnx_type(o.dtype), param_option=optional) if o.optional else fp(o.name, onnx_type(o.dtype))
               for o in spec.outputs]
    # In the emitted order: the exporter writes a node's attributes in the schema's order.
    attrs = [OpSchema.Attribute(a.name, _ATTR_TYPES[a.type], a.doc or a.name)
             for a in map(spec.attribute, spec.emitted_attributes)]
    if contract.names_plugin_version(spec):
        # Optional where a node may be of an older version (contract.VALUE_SINCE: it then has none).
        attrs.append(OpSchema.Attribute("plugin_version", OpSchema.AttrType.STRING,
                                        "the TensorRT plugin version (the node's op version)",
                                        required=(spec.op_type, spec.version) not in contract.VALUE_SINCE))
    return OpSchema(spec.op_type, DOMAIN, spec.version, doc=f"metrale {spec.op_type}: see docs/ops.md",
                    inputs=inputs, outputs=outputs,
                    type_constraints=[("T", _ACT_TYPES, "activation and output dtype")], attributes=attrs)


def schema(op_type: str) -> OpSchema:
    """The ONNX schema of ``op_type`` as the contract defines it (not registered)."""
    return _schema(contract.op(op_type))


def register_schemas() -> None:
    """Register every op's schema with onnx once per process."""
    for spec in contract.OPS.values():
        try:
            onnx.defs.get_schema(spec.op_type, spec.version, DOMAIN)
        except onnx.defs.SchemaError:
            onnx.defs.register_schema(_schema(spec))


register_schemas()


def _opset() -> onnxscript.values.Opset:
    return onnxscript.values.Opset(DOMAIN, contract.domain_version())


def translation(spec: contract.OpSpec):
    """The translation of ``metrale::<spec.torch_name>`` (arguments: x, the inputs in the torch op's
    order, then the torch attributes) into one ``metrale`` node (inputs in contract order) with the
    has_* gates set from the present inputs. An op of several outputs returns each of them, an
    absent optional one as the input its ``absent`` names (``compact_outputs`` then drops it from
    the node)."""
    params = ["x", *spec.torch_inputs, *spec.torch_attributes]
    signature = inspect.Signature([inspect.Parameter(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params])
    gates = spec.derived_gates

    def translate(*args, **kwargs):
        values = signature.bind(*args, **kwargs).arguments
        attrs = {a: (int(values[gates[a]] is not None) if a in gates else values[a])
                 for a in spec.emitted_attributes}
        if contract.names_plugin_version(spec, attrs):
            attrs["plugin_version"] = str(spec.node_version(attrs))
        inputs = [values["x"], *(values[i.name] for i in spec.inputs)]
        if len(spec.outputs) == 1:
            return getattr(_opset(), spec.op_type)(*inputs, **attrs)
        results = getattr(_opset(), spec.op_type)(*inputs, **attrs, _outputs=len(spec.outputs))
        present = spec.present_outputs(attrs)
        return tuple(r if o.name in present else values[o.absent] for o, r in zip(spec.outputs, results))

    translate.__signature__ = signature
    translate.__name__ = f"_{spec.kind}"
    return translate


def translation_table() -> dict:
    """custom_translation_table for torch.onnx.export."""
    from . import torch_ops  # noqa: F401

    return {getattr(torch.ops.metrale, spec.torch_name).default: translation(spec)
            for spec in contract.OPS.values()}


def compact_inputs(graph: onnx.GraphProto) -> int:
    """Drop empty (absent optional) inputs of every metrale node, and its absent optional outputs
    (``compact_outputs``); returns the nodes touched."""
    touched = 0
    for node in graph.node:
        if node.domain == DOMAIN and any(not i for i in node.input):
            kept = [i for i in node.input if i]
            del node.input[:]
            node.input.extend(kept)
            touched += 1
    return touched + compact_outputs(graph)


def compact_outputs(graph: onnx.GraphProto) -> int:
    """Drop the outputs a metrale node's gates say are absent (the translation traced them, unused);
    returns the nodes touched. Only trailing outputs are optional in the contract."""
    touched = 0
    for node in graph.node:
        if node.domain != DOMAIN or node.op_type not in contract.OPS:
            continue
        spec = contract.op(node.op_type)
        if len(spec.outputs) == 1:
            continue
        present = spec.present_outputs(onnx_nodes.attributes(node))
        kept = [o for o, out in zip(node.output, spec.outputs) if out.name in present]
        if len(kept) != len(node.output):
            del node.output[:]
            node.output.extend(kept)
            touched += 1
    return touched
