"""Trace one decoder layer per layer kind and replicate its nodes for the other layers of that kind.

``torch.onnx.export(dynamo=True)`` costs a few seconds per decoder layer (symbolic-shape work in
torch.export and its decompositions), so the full trace of a 28-layer model takes minutes. Layers
of one kind (same class, states and projection specs up to the layer index) trace to the same nodes,
so ``trace_replicated`` traces a model holding only the first layer of each kind and builds every
other layer by cloning its representative's nodes: values are renamed, the clone reads its own
layer's initializers (``model.layers.{i}.*``, so the weights streamed afterwards land in the right
layer), takes its own state inputs ``{state}.{i}`` and writes its own outputs ``{output}.{i}``, and
the residual stream is rewired layer to layer.

Invariants: the replicated graph has the inputs, outputs (names, order, types, shapes) and
initializer names of the full trace, and each layer computes with the same nodes as in the full
trace (bitwise-equal results in ONNX Runtime). Whatever the replication cannot recognise (no
single residual input or output, nodes not attributed to a layer) raises ``NotReplicable`` with the
reason; ``export`` then traces the whole model.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

import onnx_ir as ir
from onnx_ir._cloner import Cloner

from .layers.model import CausalLM

LAYER_SCOPE = re.compile(r"^model\.layers\.(\d+)$")


class NotReplicable(Exception):
    """The traced graph does not have the shape replication needs; the message says why."""


def layer_signature(model: CausalLM, i: int) -> tuple:
    """What makes two decoder layers trace to the same nodes: class, states, and every buffer and
    projection spec with the layer's own prefix taken out."""
    layer = model.model.layers[str(i)]
    prefix = f"model.layers.{i}."
    buffers = tuple((n, tuple(b.shape), b.dtype) for n, b in layer.named_buffers())
    specs = []
    for name, m in layer.named_modules():
        spec = getattr(m, "spec", None)
        if spec is not None:
            specs.append((name, spec.kind, spec.n, spec.k, spec.family, spec.name.replace(prefix, "", 1),
                          tuple((k, tuple(s), d) for k, (s, d) in spec.tensors.items()),
                          tuple(sorted((k, repr(v)) for k, v in spec.attrs.items()))))
    return (type(layer).__qualname__, layer.state_specs(), buffers, tuple(specs))


def representatives(model: CausalLM) -> dict[int, int]:
    """Layer id -> the first layer id of its kind."""
    first: dict[tuple, int] = {}
    return {i: first.setdefault(layer_signature(model, i), i) for i in model.layer_ids}


def _layer_of(node: ir.Node) -> int | None:
    scopes = node.metadata_props.get("pkg.torch.onnx.name_scopes")
    if not scopes:
        return None
    for scope in eval_list(scopes):
        m = LAYER_SCOPE.match(scope)
        if m:
            return int(m.group(1))
    return None


def eval_list(text: str) -> list[str]:
    """The exporter writes name scopes as a Python list literal of strings."""
    value = ast.literal_eval(text)
    if not isinstance(value, list):
        raise NotReplicable(f"node name scopes: expected a list, found {text[:80]!r}")
    return [str(v) for v in value]


def _subgraphs(node: ir.Node):
    """The graphs held in a node's attributes (a Scan or If body)."""
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            yield attr.as_graph()
        elif attr.type == ir.AttributeType.GRAPHS:
            yield from attr.as_graphs()


def _with_subgraph_nodes(nodes: list[ir.Node]) -> list[ir.Node]:
    out = []
    for node in nodes:
        out.append(node)
        for sub in _subgraphs(node):
            out.extend(ir.traversal.RecursiveGraphIterator(sub))
    return out


def _residual(values, hidden_shape: str, dtype, where: str) -> ir.Value:
    found = [v for v in values if v.dtype == dtype and str(v.shape) == hidden_shape]
    if len(found) != 1:
        raise NotReplicable(f"{where}: expected one residual value of shape {hidden_shape}, "
                            f"found {[v.name for v in found]}")
    return found[0]


def layer_nodes(graph: ir.Graph, rep_ids: list[int]) -> dict[int, list[ir.Node]]:
    """Phase 1: the nodes of each traced layer (by their name scope), checked to be clonable: every
    scoped node belongs to a traced layer, each traced layer has nodes, no unscoped node sits
    between layers, and no subgraph mixes layers."""
    nodes_of: dict[int, list[ir.Node]] = {r: [] for r in rep_ids}
    for node in graph:
        layer = _layer_of(node)
        if layer is not None:
            if layer not in nodes_of:
                raise NotReplicable(f"node {node.name} belongs to layer {layer}, which was not traced")
            nodes_of[layer].append(node)
    if any(not ns for ns in nodes_of.values()):
        raise NotReplicable("a traced layer has no nodes attributed to it")
    _check_no_node_between_layers(graph, {id(n) for ns in nodes_of.values() for n in ns})
    _check_subgraphs_stay_in_their_layer(graph)
    return nodes_of


def _check_no_node_between_layers(graph: ir.Graph, layer_node_ids: set[int]) -> None:
    for node in graph:  # a node between layers without a layer scope would not be cloned
        if id(node) in layer_node_ids:
            continue
        reads_layer = any(v is not None and v.producer() is not None and id(v.producer()) in layer_node_ids
                          for v in node.inputs)
        feeds_layer = any(id(u.node) in layer_node_ids for o in node.outputs for u in o.uses())
        if reads_layer and feeds_layer:
            raise NotReplicable(f"node {node.name} reads a layer's value and feeds a layer, "
                                "but belongs to no layer")


def _check_subgraphs_stay_in_their_layer(graph: ir.Graph) -> None:
    for node in graph:
        for sub in _subgraphs(node):
            for inner in ir.traversal.RecursiveGraphIterator(sub):
                if _layer_of(inner) not in (None, _layer_of(node)):
                    raise NotReplicable(f"subgraph of {node.name} holds nodes of another layer")


@dataclass
class Residual:
    """The residual stream through the traced layers: the embedding's output ``x0``, each layer's
    input and output, and the uses of the last layer's output after the layers (final norm)."""

    x0: ir.Value
    x_in: dict[int, ir.Value]
    x_out: dict[int, ir.Value]
    tail_uses: list[tuple[ir.Node, int]]


def residual_stream(graph: ir.Graph, nodes_of: dict[int, list[ir.Node]]) -> Residual:
    """Phase 2: find the residual stream, checked to run embedding -> layer -> layer -> tail."""
    rep_ids = sorted(nodes_of)
    outputs = {v.name for v in graph.outputs}
    x0 = _embedding_output(graph)
    hidden_shape, dtype = str(x0.shape), x0.dtype

    # The residual stream of each traced layer: the value it reads from before it and the one it
    # hands on (the graph outputs are its states).
    x_in, x_out = {}, {}
    for r in rep_ids:
        external, handed = _layer_boundary(nodes_of[r], outputs)
        x_in[r] = _residual(external, hidden_shape, dtype, f"layer {r} input")
        x_out[r] = _residual(handed, hidden_shape, dtype, f"layer {r} output")
    for a, b in zip(rep_ids, rep_ids[1:]):
        if x_in[b] is not x_out[a]:
            raise NotReplicable(f"layer {b} does not read layer {a}'s residual output")
    if x_in[rep_ids[0]] is not x0:
        raise NotReplicable(f"layer {rep_ids[0]} does not read the embedding")
    last = x_out[rep_ids[-1]]
    last_own = {id(n) for n in _with_subgraph_nodes(nodes_of[rep_ids[-1]])}
    tail_uses = [(u.node, u.idx) for u in last.uses() if id(u.node) not in last_own]
    return Residual(x0, x_in, x_out, tail_uses)


def _embedding_output(graph: ir.Graph) -> ir.Value:
    """The output of the Gather reading model.embed_tokens.weight: where the residual starts."""
    embed = next((n for n in graph if n.op_type == "Gather"
                  and any(v is not None and v.name == "model.embed_tokens.weight" for v in n.inputs)), None)
    if embed is None:
        raise NotReplicable("no Gather reading model.embed_tokens.weight (the residual's start)")
    return embed.outputs[0]


def _layer_boundary(nodes: list[ir.Node], outputs: set[str]) -> tuple[list[ir.Value], list[ir.Value]]:
    """(the values a layer's ``nodes`` read from nodes outside it, in first-read order; the values
    they produce that nodes outside it read, graph outputs (its states) excluded)."""
    own = {id(n) for n in _with_subgraph_nodes(nodes)}
    external = []
    for v in (v for n in nodes for v in n.inputs):
        if _produced_outside(v, own) and v not in external:
            external.append(v)
    return external, _handed_on(nodes, own, outputs)


def _handed_on(nodes: list[ir.Node], own: set[int], outputs: set[str]) -> list[ir.Value]:
    """The values ``nodes`` produce that nodes outside ``own`` read, graph ``outputs`` excluded."""
    return [o for n in nodes for o in n.outputs if o.name not in outputs and _read_outside(o, own)]


def _read_outside(v: ir.Value, own: set[int]) -> bool:
    """Whether a node whose id is not in ``own`` reads ``v``."""
    return any(id(u.node) not in own for u in v.uses())


def _produced_outside(v: ir.Value | None, own: set[int]) -> bool:
    """Whether ``v`` is made by a node whose id is not in ``own`` (graph inputs and initializers are not)."""
    return v is not None and v.producer() is not None and id(v.producer()) not in own


def clone_layer(graph: ir.Graph, nodes: list[ir.Node], r: int, i: int, states, prev: ir.Value,
                res: Residual, new_initializer: Callable[[str, ir.Value], ir.Value]):
    """Phase 3: layer ``i`` as a clone of its representative ``r``'s ``nodes``, reading ``prev``.

    Returns (clones, its state inputs, its state outputs, its residual output). Values and nodes
    are renamed ``*.layer{i}``, string attributes and name scopes moved to ``model.layers.{i}``,
    and the layer's own initializers made by ``new_initializer`` and registered in ``graph``."""
    inputs = {v.name: v for v in graph.inputs}
    outputs = {v.name: v for v in graph.outputs}
    value_map: dict[ir.Value, ir.Value] = {res.x_in[r]: prev}
    new_inputs = []
    for s in states:
        old = inputs[f"{s.name}.{r}"]
        new = ir.Value(name=f"{s.name}.{i}", type=old.type, shape=old.shape.copy())
        value_map[old] = new
        new_inputs.append(new)
    _map_layer_initializers(graph, nodes, r, i, value_map, new_initializer)
    cloner = Cloner(attr_map={}, value_map=value_map, metadata_props={}, post_process=_LayerRenamer(r, i),
                    allow_outer_scope_values=True)
    clones = [cloner.clone_node(n) for n in nodes]
    for clone in clones:  # subgraph inputs keep their names: make them unique too
        for v in (v for sub in _subgraphs(clone) for v in sub.inputs):
            v.name = f"{v.name}.layer{i}"
    new_outputs = []
    for s in states:
        out = value_map[outputs[f"{s.output}.{r}"]]
        out.name = f"{s.output}.{i}"
        new_outputs.append(out)
    return clones, new_inputs, new_outputs, value_map[res.x_out[r]]


def _map_layer_initializers(graph: ir.Graph, nodes: list[ir.Node], r: int, i: int,
                            value_map: dict[ir.Value, ir.Value],
                            new_initializer: Callable[[str, ir.Value], ir.Value]) -> None:
    """Map each initializer of layer ``r`` that ``nodes`` read to layer ``i``'s own (made by
    ``new_initializer`` and registered in ``graph``); shared ones (constants the tracer lifted) stay."""
    src_prefix, dst_prefix = f"model.layers.{r}.", f"model.layers.{i}."
    for v in (v for node in nodes for v in node.inputs):
        if v is None or not v.is_initializer() or v in value_map or not v.name.startswith(src_prefix):
            continue
        new = new_initializer(dst_prefix + v.name[len(src_prefix):], v)
        graph.register_initializer(new)
        value_map[v] = new


class _LayerRenamer:
    """The cloner's post-processing of a node of layer ``r`` cloned as layer ``i``: its name and
    outputs get ``.layer{i}``, string attributes and name scopes move to ``model.layers.{i}``."""

    def __init__(self, r: int, i: int):
        self.r, self.i = r, i
        self.src_prefix, self.dst_prefix = f"model.layers.{r}.", f"model.layers.{i}."

    def __call__(self, node: ir.Node) -> None:
        node.name = f"{node.name}.layer{self.i}" if node.name else None
        for o in node.outputs:
            o.name = f"{o.name}.layer{self.i}"
        for key, attr in list(node.attributes.items()):
            if attr.type == ir.AttributeType.STRING and attr.as_string().startswith(self.src_prefix):
                node.attributes[key] = ir.AttrString(key, self.dst_prefix + attr.as_string()[len(self.src_prefix):])
        scopes = node.metadata_props.get("pkg.torch.onnx.name_scopes")
        if scopes:
            node.metadata_props["pkg.torch.onnx.name_scopes"] = scopes.replace(
                f"'model.layers.{self.r}", f"'model.layers.{self.i}")


def order_nodes(graph: ir.Graph, nodes_of: dict[int, list[ir.Node]], layers: list[list[ir.Node]]) -> None:
    """Phase 4: the graph's nodes as what precedes the first traced layer, ``layers`` in order,
    then the rest (the traced layers' own nodes replaced by ``layers``), topologically sorted."""
    layered = {id(n) for ns in nodes_of.values() for n in ns}
    all_nodes = list(graph)
    first = next(k for k, n in enumerate(all_nodes) if id(n) in layered)
    head = all_nodes[:first]
    rest = [n for n in all_nodes[first:] if id(n) not in layered]
    order = head + [n for ns in layers for n in ns] + rest
    graph.remove(all_nodes)
    graph.extend(order)
    graph.sort()


def replicate(traced: ir.Model, model: CausalLM, reps: dict[int, int],
              new_initializer: Callable[[str, ir.Value], ir.Value]) -> ir.Model:
    """Expand ``traced`` (a trace of the representative layers, ``sorted(set(reps.values()))``) into
    the graph of every layer of ``model``; ``new_initializer(name, like)`` makes the initializer
    ``name`` of a cloned layer (typed like its representative's ``like``). The four phases:
    ``layer_nodes``, ``residual_stream``, ``clone_layer`` per layer, ``order_nodes``."""
    graph = traced.graph
    nodes_of = layer_nodes(graph, sorted(set(reps.values())))
    res = residual_stream(graph, nodes_of)
    inputs = {v.name: v for v in graph.inputs}
    outputs = {v.name: v for v in graph.outputs}

    # Build every layer in order: representatives keep their nodes (rewired), others are clones.
    new_inputs = [inputs["input_ids"], inputs["position_ids"]]
    new_outputs = [outputs["logits"]]
    layers: list[list[ir.Node]] = []
    prev = res.x0
    for i in model.layer_ids:
        r = reps[i]
        states = model.states[i]
        if i == r:
            _rewire(nodes_of[r], res.x_in[r], prev)
            layers.append(nodes_of[r])
            new_inputs += [inputs[f"{s.name}.{i}"] for s in states]
            new_outputs += [outputs[f"{s.output}.{i}"] for s in states]
            prev = res.x_out[r]
            continue
        clones, state_in, state_out, prev = clone_layer(graph, nodes_of[r], r, i, states, prev, res,
                                                        new_initializer)
        layers.append(clones)
        new_inputs += state_in
        new_outputs += state_out

    if "hidden_states" in outputs:  # the MTP head's input (CausalLM.hidden_output): after the states
        new_outputs.append(outputs["hidden_states"])
    for node, idx in res.tail_uses:
        node.replace_input_with(idx, prev)
    order_nodes(graph, nodes_of, layers)
    graph.inputs.clear()
    graph.inputs.extend(new_inputs)
    graph.outputs.clear()
    graph.outputs.extend(new_outputs)
    return traced


def _rewire(nodes: list[ir.Node], old: ir.Value, new: ir.Value) -> None:
    """Make ``nodes`` read ``new`` wherever they read ``old``."""
    for node in nodes:
        for idx, v in enumerate(node.inputs):
            if v is old:
                node.replace_input_with(idx, new)


def trace_replicated(model: CausalLM, make_model: Callable[[list[int]], CausalLM],
                     trace: Callable[[CausalLM], ir.Model]) -> ir.Model:
    """The graph of ``model`` from a trace of one layer per kind (``make_model(layer_ids)`` builds
    the smaller model on the meta device, ``trace`` traces it)."""
    reps = representatives(model)
    rep_ids = sorted(set(reps.values()))
    if rep_ids == list(model.layer_ids):
        return trace(model)
    small = make_model(rep_ids)
    traced = trace(small)
    buffers = dict(model.named_buffers())

    def new_initializer(name: str, like: ir.Value) -> ir.Value:
        if name not in buffers:
            raise NotReplicable(f"initializer {name}: no such buffer in the model")
        b = buffers[name]
        if tuple(b.shape) != tuple(like.shape) or like.const_value is None:
            raise NotReplicable(f"initializer {name}: shape {list(b.shape)} differs from its representative's")

        def unread():
            raise RuntimeError(f"{name}: a weight is attached after tracing, never read from the graph")

        tensor = ir.LazyTensor(unread, dtype=like.const_value.dtype, shape=ir.Shape(list(b.shape)), name=name)
        return ir.Value(name=name, type=like.type, shape=like.shape.copy(), const_value=tensor)

    return replicate(traced, model, reps, new_initializer)
