"""A graph's ``metrale`` nodes checked against the op contract: each node's attributes (read by
``onnx_nodes``, the one reader of metrale nodes) with absent ones filled with their defaults, and the
projections listed with what the policy needs of them (``OpInfo``). The lowerings and the build plan
take nodes from here.

Invariants: a node's key is its ``name`` attribute, else its node name, else ``<op>_<index>``, in
both the ONNX and the graphsurgeon views; every refusal names the node and says what the contract
expects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from .. import contract, onnx_nodes
from ..errors import InputError

if TYPE_CHECKING:
    import onnx_graphsurgeon as gs

DOMAIN = contract.DOMAIN


class LoweringError(InputError):
    """A metrale node that does not follow docs/ops.md (attributes, inputs, shapes)."""


@dataclass(frozen=True)
class OpInfo:
    """What the policy needs of one metrale node; ``key`` names it in manifests and messages."""

    key: str
    op_type: str
    family: str
    activation_format: str
    n: int
    k: int


def _key(node: onnx.NodeProto, attrs: dict, index: int) -> str:
    return onnx_nodes.key(attrs, node.name, node.op_type, index)


def contract_attributes(node_op: str, attrs: dict, key: str) -> dict:
    """A node's attributes checked against the contract, absent ones filled with their defaults.

    Refuses an unknown op type, an attribute the contract does not define for the op, a missing
    required one, a wrong type and a value outside the allowed ones, each with the node named.
    """
    if node_op not in contract.OPS:
        raise LoweringError(
            f"node {key}: unknown op type {DOMAIN}::{node_op}; expected one of "
            f"{', '.join(contract.op_types())} (docs/ops.md)"
        )
    spec = contract.op(node_op)
    attrs = _without_plugin_version(spec, attrs, key)
    unknown = sorted(set(attrs) - set(spec.attribute_names))
    if unknown:
        raise LoweringError(
            f"node {key} ({node_op}): attribute(s) {', '.join(unknown)} are not in the op contract; "
            f"{node_op} has {', '.join(spec.attribute_names)} (docs/ops.md)"
        )
    out = {}
    for a in spec.attributes:
        if a.name in attrs:
            out[a.name] = _attribute_value(a, attrs[a.name], f"node {key} ({node_op})")
        elif a.default is None:
            raise LoweringError(f"node {key} ({node_op}): attribute {a.name!r} is missing")
        else:
            out[a.name] = a.default
    return out


def _without_plugin_version(spec, attrs: dict, key: str) -> dict:
    """``attrs`` less ``plugin_version``, TensorRT's plugin lookup key (docs/ops.md), not an op
    attribute; it must name the node's version."""
    if not (contract.names_plugin_version(spec) and "plugin_version" in attrs):
        return attrs
    attrs = dict(attrs)
    found = onnx_nodes.text(attrs.pop("plugin_version"))
    want = str(spec.node_version(attrs))
    if found != want:
        raise LoweringError(f"node {key} ({spec.op_type}): plugin_version {found!r}: expected "
                            f"{want!r} (docs/ops.md)")
    return attrs


def _typed(a, value, where: str):
    """``value`` as attribute ``a``'s contract type (string, float or int), refused when of another."""
    if a.type == "string":
        if not isinstance(value, (str, bytes)):
            raise LoweringError(f"{where}: attribute {a.name!r}: expected a string, found {value!r}")
        return onnx_nodes.text(value)
    if a.type == "float":
        if not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool):
            raise LoweringError(f"{where}: attribute {a.name!r}: expected a float, found {value!r}")
        return float(value)
    if not isinstance(value, (int, np.integer)):
        raise LoweringError(f"{where}: attribute {a.name!r}: expected an int, found {value!r}")
    return int(value)


def _attribute_value(a, value, where: str):
    """One attribute's value as its contract type, refused when of another type or outside the
    allowed values."""
    value = _typed(a, value, where)
    if a.values is not None and value not in a.values and not (a.default is not None and value == a.default):
        raise LoweringError(
            f"{where}: attribute {a.name}={value!r}: expected one of "
            f"{', '.join(map(str, a.values))} (docs/ops.md)"
        )
    return value


def metrale_ops(model: onnx.ModelProto) -> list[OpInfo]:
    """The metrale projection nodes of the main graph, in graph order, checked against the contract
    (a graph of an older op contract is refused: ``contract.check_model``); the other metrale
    nodes are checked too, but have no activation format to choose and are not listed."""
    try:
        contract.check_model(model, "the ONNX graph")
    except InputError as e:
        raise LoweringError(str(e)) from e
    ops = []
    for i, node in onnx_nodes.metrale_nodes(model.graph):
        a = onnx_nodes.attributes(node)
        key = _key(node, a, i)
        a = contract_attributes(node.op_type, a, key)
        if not contract.op(node.op_type).is_projection:
            continue  # norms, the float projection, the router: no activation format to choose
        ops.append(OpInfo(key, node.op_type, a["family"], a["activation_format"], a["n"], a["k"]))
    keys = [op.key for op in ops]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise LoweringError(f"metrale nodes share the names {dupes}; each projection needs its own")
    return ops


def _key_gs(node: gs.Node, attrs: dict, index: int) -> str:
    return onnx_nodes.key(attrs, node.name, node.op, index)
