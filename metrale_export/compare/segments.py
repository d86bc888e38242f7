"""The export's graph cut into pieces that run one after another: the embedding, each decoder
layer, and the head (final norm, lm_head), so that ``compare`` holds one piece's weights at a time.

``plan_segments`` is a pure reading of the graph (no weights): a segment is the nodes needed for its
targets (the embedding: layer 0's residual input; a layer: its residual output, its state outputs
and its metrale ops' values; the head: every graph output left and the values of the metrale ops of
no layer, the final norm and the lm_head) that no earlier segment holds. The residual stream is
taps.py's: it runs through the Adds and the RMSNorms that fuse the residual add.
``segment_model`` writes one segment as a standalone ONNX model whose initializers are the graph's
own (external ones stay references into the export's data file).

Invariants: every node a graph output depends on lands in exactly one segment, and a segment keeps
the graph's node order; a segment reads only graph inputs, initializers and values that earlier
segments list as outputs; running the segments in order computes every graph output with the
graph's own nodes. Subgraph bodies (GDN's Scan) count their outer-scope reads as inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from .taps import GraphTaps


@dataclass(frozen=True)
class Segment:
    name: str  # "embedding", "layer 3", "head"
    layer: int | None  # the decoder layer (None: the embedding and the head)
    nodes: tuple[int, ...]  # indices into graph.node, in graph order
    inputs: tuple[str, ...]  # graph inputs and earlier segments' outputs it reads
    outputs: tuple[str, ...]  # what later segments, the graph's outputs or the checks read
    initializers: tuple[str, ...]


def _outer_reads(g: onnx.GraphProto) -> set[str]:
    """Values a subgraph body reads from the enclosing scope."""
    inner = {v.name for v in g.input} | {t.name for t in g.initializer}
    inner |= {o for n in g.node for o in n.output}
    reads = set()
    for n in g.node:
        reads |= {i for i in n.input if i} | _node_subgraph_reads(n)
    return reads - inner


def _node_subgraph_reads(node: onnx.NodeProto) -> set[str]:
    reads = set()
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            reads |= _outer_reads(g)
    return reads


def node_reads(node: onnx.NodeProto) -> list[str]:
    """A node's inputs plus the outer-scope values its subgraphs read."""
    return [i for i in node.input if i] + sorted(_node_subgraph_reads(node))


def layer_targets(taps: GraphTaps, state_outputs: dict[int, list[str]]) -> dict[int, list[str]]:
    """Per decoder layer, the values its segment must compute: its residual output, its state
    outputs (``state_outputs``, graph output names) and its metrale ops' inputs and outputs (all of
    them: a fused RMSNorm's ``residual_out`` is the residual stream inside the layer)."""
    out = {}
    for i, tap in taps.layers.items():
        values = [tap.x_out, *state_outputs.get(i, [])]
        values += op_values(taps, i)
        out[i] = list(dict.fromkeys(values))
    return out


def op_values(taps: GraphTaps, layer: int | None) -> list[str]:
    """The inputs and outputs of the metrale ops of ``layer`` (None: the head's, the final norm and
    the lm_head), which the per-op checks read."""
    return [v for t in taps.ops if t.layer == layer for v in (*t.inputs, t.y, *t.outputs)]


@dataclass
class _Reading:
    """What the cut reads of the graph: initializers, graph inputs, each value's producer (a node
    index), each node's reads, and which segment owns each node so far."""
    inits: set[str]
    graph_inputs: set[str]
    producer: dict[str, int]
    reads: list[list[str]]
    owner: dict[int, int]

    @classmethod
    def of(cls, graph: onnx.GraphProto) -> _Reading:
        return cls({t.name for t in graph.initializer}, {v.name for v in graph.input},
                   {o: j for j, n in enumerate(graph.node) for o in n.output if o},
                   [node_reads(n) for n in graph.node], {})


def _targets(graph: onnx.GraphProto, taps: GraphTaps, state_outputs: dict[int, list[str]]) -> list[tuple]:
    """(name, layer, the values it must compute) of every segment in run order."""
    layers = sorted(taps.layers)
    targets = [("embedding", None, [taps.layers[layers[0]].x_in])]
    per_layer = layer_targets(taps, state_outputs)
    targets += [(f"layer {i}", i, per_layer[i]) for i in layers]
    targets.append(("head", None, [o.name for o in graph.output] + op_values(taps, None)))
    return targets


def _claim(r: _Reading, s: int, name: str, wanted: list[str]) -> tuple[set, list, list] | str:
    """Segment ``s``'s nodes (those ``wanted`` needs that no earlier segment owns, now owned by
    ``s``), the values it reads from graph inputs or earlier segments, and its initializers; or why
    a value cannot be had."""
    nodes, seg_inputs, seg_inits = set(), [], []
    todo = list(reversed(wanted))
    seen = set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in r.inits:
            seg_inits.append(v)
        elif v in r.graph_inputs:
            seg_inputs.append(v)
        elif v not in r.producer:
            return f"{name}: value {v!r} has no producer, is no graph input and no initializer"
        elif r.owner.get(r.producer[v], s) != s:
            seg_inputs.append(v)
        elif r.producer[v] not in nodes:
            j = r.producer[v]
            nodes.add(j)
            r.owner[j] = s
            todo.extend(reversed(r.reads[j]))
    return nodes, seg_inputs, seg_inits


def _outputs(r: _Reading, plans: list[list], graph: onnx.GraphProto) -> list[list[str]]:
    """Per segment, what it outputs: its wanted values, and whatever a later segment or the graph's
    outputs read from it."""
    outputs = [list(p[4]) for p in plans]
    read_later = [v for p in plans for v in p[3]] + [o.name for o in graph.output]
    for v in read_later:
        if v in r.producer:
            outputs[r.owner[r.producer[v]]].append(v)
    return outputs


def plan_segments(graph: onnx.GraphProto, taps: GraphTaps,
                  state_outputs: dict[int, list[str]]) -> list[Segment] | str:
    """The segments in run order, or why the graph cannot be cut (no layers found)."""
    if not taps.layers:
        return taps.reason or "no decoder layer found on the residual stream"
    r = _Reading.of(graph)
    plans = _plans(r, graph, taps, state_outputs)
    if isinstance(plans, str):
        return plans
    outputs = _outputs(r, plans, graph)
    return [_segment(r, p, outputs[s]) for s, p in enumerate(plans)]


def _plans(r: _Reading, graph: onnx.GraphProto, taps: GraphTaps,
           state_outputs: dict[int, list[str]]) -> list[list] | str:
    """Per segment in run order: [name, layer, its nodes, its inputs, its wanted values, its
    initializers]; or why a segment cannot be cut."""
    plans = []
    for s, (name, layer, wanted) in enumerate(_targets(graph, taps, state_outputs)):
        if name == "head":  # the graph outputs no layer computed (the states are the layers')
            wanted = [w for w in wanted if r.producer.get(w) not in r.owner]
        claimed = _claim(r, s, name, wanted)
        if isinstance(claimed, str):
            return claimed
        nodes, seg_inputs, seg_inits = claimed
        plans.append([name, layer, sorted(nodes), seg_inputs, [w for w in wanted if w in r.producer], seg_inits])
    return plans


def _segment(r: _Reading, p: list, outputs: list[str]) -> Segment:
    """One plan as a Segment: its outputs those of ``outputs`` its own nodes compute, once each."""
    own = set(p[2])
    return Segment(p[0], p[1], tuple(p[2]), tuple(dict.fromkeys(p[3])),
                   tuple(v for v in dict.fromkeys(outputs) if r.producer.get(v) in own),
                   tuple(dict.fromkeys(p[5])))


def _value_info(name: str, infos: dict, types: dict) -> onnx.ValueInfoProto:
    if name in infos:
        v = onnx.ValueInfoProto()
        v.CopyFrom(infos[name])
        return v
    return onnx.helper.make_tensor_value_info(name, types.get(name, 0), None)


def value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every value's inferred type and shape (inputs, outputs, intermediates), from shape inference
    on the graph as given (external weights: their declared types and shapes only)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    return {v.name: v for v in [*g.value_info, *g.input, *g.output] if v.type.tensor_type.elem_type}


def segment_model(model: onnx.ModelProto, seg: Segment, infos: dict) -> onnx.ModelProto:
    """One segment as a standalone model (opsets, IR version and metadata of ``model``)."""
    g = model.graph
    by_name = {t.name: t for t in g.initializer}
    types = {t.name: t.data_type for t in g.initializer}
    graph = onnx.helper.make_graph(
        [g.node[j] for j in seg.nodes], seg.name.replace(" ", "_"),
        [_value_info(v, infos, types) for v in seg.inputs],
        [_value_info(v, infos, types) for v in seg.outputs],
        [by_name[n] for n in seg.initializers])
    out = onnx.helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    out.producer_name, out.producer_version = model.producer_name, model.producer_version
    for p in model.metadata_props:
        out.metadata_props.add().CopyFrom(p)
    return out
