"""Where to look inside an exported graph: the residual stream between decoder layers and the input
and output of every metrale op, by value name, found from the graph alone (no weights read).

The residual stream starts at the embedding's Gather and runs through a chain of ``Add`` nodes
(``x = x + branch``) and of ``RMSNorm`` nodes that fuse that add (``has_residual``: the stream is
their ``residual`` input, the branch their x, the stream goes on from ``residual_out``); each step belongs to the decoder layer whose nodes compute its branch (metrale
ops by their ``name`` attribute, other nodes by the ``model.layers.{i}.*`` weights they read). Layer ``i`` reads the stream value before its
first Add and writes the one after its last.

Invariants: pure graph reading; a graph whose stream cannot be followed (no embedding Gather, an Add
whose branch holds no or several layers' ops) gives ``GraphTaps.layers == {}`` and a ``reason``,
never an exception, so the per-op and end-to-end checks still run.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

import onnx

from .. import onnx_nodes
from ..ops import onnx_translation as ot

LAYER_NAME = re.compile(r"^model\.layers\.(\d+)\.")
EMBEDDING = "model.embed_tokens.weight"


@dataclass(frozen=True)
class OpTap:
    """One metrale node: its projection (checkpoint name), layer (None: lm_head) and values."""

    node: str
    op_type: str
    projection: str
    layer: int | None
    x: str
    y: str
    activation_format: str
    # Every input that is not a weight, in node order: x, and for the grouped-expert ops the routing
    # (topk_ids, topk_weights); the PyTorch module takes them in this order.
    inputs: tuple[str, ...] = ()
    # Every output of the node (y first; RMSNorm's residual_out, the router's two).
    outputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayerTap:
    layer: int
    x_in: str
    x_out: str


@dataclass
class GraphTaps:
    ops: list[OpTap] = field(default_factory=list)
    layers: dict[int, LayerTap] = field(default_factory=dict)
    reason: str = ""

    def values(self) -> list[str]:
        """Every value to expose as a graph output, once each."""
        names = [v for t in self.ops for v in (*t.inputs, t.y, *t.outputs)]
        names += [v for t in self.layers.values() for v in (t.x_in, t.x_out)]
        return list(dict.fromkeys(names))


def _layer_of(projection: str) -> int | None:
    m = LAYER_NAME.match(projection)
    return int(m.group(1)) if m else None


def find_taps(graph: onnx.GraphProto) -> GraphTaps:
    taps = GraphTaps()
    weights = {t.name for t in graph.initializer}
    producer, consumers = _edges(graph)
    # A node's layer: its projection's (metrale ops), else the latest layer whose weights it reads
    # (an earlier layer's only where the exporter deduplicated equal small initializers).
    op_layer: dict[int, tuple[int, int]] = {}
    for node in graph.node:
        read = [_layer_of(i) for i in node.input if _layer_of(i) is not None]
        if read:
            op_layer[id(node)] = (1, max(read))
        if node.domain in (ot.DOMAIN, "ai.onnx.contrib") and node.input:
            tap = _op_tap(node, weights)
            if tap.layer is not None:
                op_layer[id(node)] = (0, tap.layer)
            taps.ops.append(tap)
    taps.layers, taps.reason = _residual_layers(graph, producer, consumers, op_layer)
    return taps


def _edges(graph: onnx.GraphProto) -> tuple[dict[str, onnx.NodeProto], dict[str, list[onnx.NodeProto]]]:
    """Value -> the node that produces it, and value -> the nodes that read it."""
    producer: dict[str, onnx.NodeProto] = {}
    consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for o in node.output:
            producer[o] = node
        for i in node.input:
            consumers[i].append(node)
    return producer, consumers


def _op_tap(node: onnx.NodeProto, weights: set[str]) -> OpTap:
    """The tap of a metrale node (or its reference variant): its activation inputs and outputs."""
    proj = onnx_nodes.attribute(node, "name", "")
    inputs = tuple(v for v in node.input if v and v not in weights)
    return OpTap(node.name, node.op_type.split("__")[0], proj, _layer_of(proj), node.input[0],
                 node.output[0], onnx_nodes.attribute(node, "activation_format", ""), inputs, tuple(node.output))


def _residual_stream(graph, consumers) -> tuple[list[str], list, list] | str:
    """The residual stream from the embedding's Gather: its values, the nodes that add a branch to
    it and each one's branch inputs; or why there is none."""
    gathers = [n for n in graph.node if n.op_type == "Gather" and n.input and n.input[0] == EMBEDDING]
    if len(gathers) != 1:
        return f"expected one Gather of {EMBEDDING} (the residual stream's start), found {len(gathers)}"
    chain = [gathers[0].output[0]]
    adds, branches = [], []
    while True:
        nxt = [step for n in consumers.get(chain[-1], []) if (step := _stream_step(n, chain[-1])) is not None]
        if len(nxt) != 1:
            break
        node, out, branch = nxt[0]
        adds.append(node)
        branches.append(branch)
        chain.append(out)
    return chain, adds, branches


def _residual_layers(graph, producer, consumers, op_layer):
    stream = _residual_stream(graph, consumers)
    if isinstance(stream, str):
        return {}, stream
    chain, adds, branches = stream
    on_chain = set(chain)
    layer_adds: dict[int, list[int]] = defaultdict(list)
    for j, add in enumerate(adds):
        layers = _branch_layers(branches[j], producer, on_chain, op_layer)
        if len(layers) != 1:
            return {}, (f"residual Add {add.name!r}: its branch holds the ops of layers {sorted(layers)}, "
                        "expected one layer")
        layer_adds[layers.pop()].append(j)
    taps = {}
    for layer, js in layer_adds.items():
        if js != list(range(js[0], js[-1] + 1)):
            return {}, f"layer {layer}: its residual Adds are not consecutive on the stream"
        taps[layer] = LayerTap(layer, chain[js[0]], chain[js[-1] + 1])
    return dict(sorted(taps.items())), ""


def _stream_step(node: onnx.NodeProto, stream: str):
    """(node, the stream after it, its branch inputs) when ``node`` adds a branch to ``stream``: an
    Add, or an RMSNorm that fuses the add (its residual_out continues the stream); else None."""
    if node.op_type == "Add":
        return node, node.output[0], [v for v in node.input if v != stream]
    fused = (node.domain in (ot.DOMAIN, "ai.onnx.contrib") and node.op_type.split("__")[0] == "RMSNorm"
             and len(node.output) > 1)
    if fused and stream in (node.input[0], node.input[2]):
        return node, node.output[1], [v for v in (node.input[0], node.input[2]) if v != stream]
    return None


def _branch_layers(values, producer, stop: set[str], op_layer) -> set[int]:
    """Layer ids of the metrale ops that ``values`` depend on, not looking past the stream (with
    none, the latest layer whose weights they read)."""
    seen, todo, layers, read = set(), list(values), set(), set()
    while todo:
        v = todo.pop()
        if v in seen or v in stop:
            continue
        seen.add(v)
        node = producer.get(v)
        if node is None:
            continue
        kind, layer = op_layer.get(id(node), (None, None))
        if kind is not None:
            (layers if kind == 0 else read).add(layer)
        todo.extend(node.input)
    return layers or ({max(read)} if read else set())
