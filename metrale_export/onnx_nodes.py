"""The one reader of metrale nodes in an ONNX graph: a node's attributes (strings as ``str``), one
attribute, a node's key (its ``name`` attribute, else the node's name, else its op type and index),
and a graph's metrale nodes in order.

The lowering (``engines/nodes.py`` checks what this reads against the contract), the export's
manifest (``exporter/manifest.py``), the ONNX Runtime reference session (``ops/ort.py``), the
translation's clean-up (``ops/onnx_translation.py``), the taps (``compare/taps.py``) and the
row-invariance audit (``invariance.py``) all read metrale nodes through it.

Invariants: the contract and, when a node is read, onnx (imported then: the torch-free and onnx-free
preflight imports this module through invariance.py); reading changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .contract import DOMAIN

if TYPE_CHECKING:
    import onnx


def text(value) -> str:
    """A string attribute's value as ``str`` (ONNX stores bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _value(a: onnx.AttributeProto):
    from onnx.helper import get_attribute_value

    v = get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else v


def attributes(node: onnx.NodeProto) -> dict:
    """Attribute name -> value, as written in the graph (strings as ``str``)."""
    return {a.name: _value(a) for a in node.attribute}


def attribute(node: onnx.NodeProto, name: str, default=None):
    """One attribute's value (strings as ``str``), ``default`` when the node has none of that name."""
    return next((_value(a) for a in node.attribute if a.name == name), default)


def key(attrs: dict, node_name: str, op_type: str, index: int) -> str:
    """The name a metrale node goes by in manifests and messages: its ``name`` attribute, else the
    node's name, else ``<op type>_<index in the graph>``."""
    name = attrs.get("name")
    if name is not None and text(name):
        return text(name)
    return node_name or f"{op_type}_{index}"


def metrale_nodes(graph: onnx.GraphProto) -> list[tuple[int, onnx.NodeProto]]:
    """(index in the graph, node) of every metrale node of ``graph``, in graph order."""
    return [(i, node) for i, node in enumerate(graph.node) if node.domain == DOMAIN]
