"""What the row-invariance promise covers in a graph, and what it leaves to TensorRT.

The promise is about the metrale projections: with the plugin lowering and one activation format
per op, each projection's output row has the same bits whatever M (docs/engines.md). Every other
node that reduces along an axis or whose kernel TensorRT picks per shape (MatMul, Gemm, Reduce*,
Softmax, Scan, TopK, Conv, the normalisations ...) stays a TensorRT layer whose tactic may change
with the profile, and so is *not* covered. ``audit`` lists both; ``engine_promise`` turns the list
and the build's policy into the engine manifest's ``row_invariance`` entry.

Invariants: torch-free and pure (an ``onnx.GraphProto`` in, a JSON-able dict out); subgraphs (Scan
and Loop bodies) are walked; ``promised`` is true only when the policy promises it *and* nothing is
left to TensorRT.
"""

from __future__ import annotations

from collections import Counter

from . import contract, onnx_nodes
from .contract import DOMAIN
NORMALIZATIONS = frozenset({
    "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization", "GroupNormalization", "InstanceNormalization",
    "BatchNormalization", "LpNormalization", "MeanVarianceNormalization",
})
# Ops whose result depends on a reduction order or a kernel TensorRT chooses per shape.
ROW_SENSITIVE = frozenset({
    "MatMul", "Gemm", "Einsum", "MatMulInteger", "QLinearMatMul", "Conv", "ConvTranspose", "Softmax",
    "LogSoftmax", "Hardmax", "TopK", "ArgMax", "ArgMin", "Scan", "Loop", "CumSum", "Attention",
    "MultiHeadAttention", "GroupQueryAttention",
}) | NORMALIZATIONS
PROJECTIONS_ONLY = "projections only"
# describe_left names this many weights per kind, then says how many more.
NAMED_WEIGHTS = 3


# The contract's non-projection categories as audit kinds.
_CATEGORY_KINDS = {"attention": "attention", "norm": "norm", "float projection": "float projection",
                   "router": "routing", "recurrence": "recurrence"}


def _unplugged(op_type: str) -> bool:
    return op_type in contract.OPS and not contract.op(op_type).has_plugin


def _sensitive(op_type: str) -> bool:
    return op_type in ROW_SENSITIVE or op_type.startswith("Reduce")


_KIND_OF_OP = {
    **dict.fromkeys(("Softmax", "LogSoftmax", "Hardmax", "Attention", "MultiHeadAttention",
                     "GroupQueryAttention"), "attention"),
    **dict.fromkeys(("TopK", "ArgMax", "ArgMin"), "routing"),
    **dict.fromkeys(("Scan", "Loop", "CumSum"), "recurrence"),
}
_PROJECTIONS = ("MatMul", "Gemm", "Einsum", "MatMulInteger", "QLinearMatMul")


def _reduction_kind(node, producers: dict) -> str:
    # RMSNorm traces to Pow -> ReduceMean -> Add(eps) -> Sqrt -> Reciprocal -> Mul.
    src = producers.get(node.input[0]) if node.input else None
    traced_norm = src is not None and src.op_type in ("Pow", "Mul") and node.op_type == "ReduceMean"
    return "norm" if traced_norm else "reduction"


def _kind(node, producers: dict, constants: set) -> str:
    """attention | norm | float projection | routing | recurrence | convolution | reduction."""
    op = node.op_type
    if op in NORMALIZATIONS:
        return "norm"
    if op.startswith("Reduce"):
        return _reduction_kind(node, producers)
    if op in _PROJECTIONS:
        return "float projection" if any(i in constants for i in node.input[:2]) else "attention"
    return _KIND_OF_OP.get(op, "convolution")


def _layer_of(name: str) -> str:
    """'model.layers.3.mlp.down_proj' -> 'model.layers.3'; other names -> 'model'."""
    parts = name.split(".")
    for i, p in enumerate(parts[:-1]):
        if p == "layers" and parts[i + 1].isdigit():
            return ".".join(parts[: i + 2])
    return "model"


def _walk(graph, prefix: str, out: list) -> None:
    for node in graph.node:
        out.append((prefix, node))
        for a in node.attribute:
            subs = [a.g] if a.HasField("g") else list(a.graphs)
            for sub in subs:
                _walk(sub, f"{prefix}{node.name or node.op_type}/", out)


def _node_name(prefix: str, node) -> str:
    return prefix + (node.name or node.op_type)


def _expanded_entry(prefix: str, node) -> dict:
    """A metrale op with no TensorRT plugin yet: the plugin lowering expands it to standard ops
    (engines/expand.py), so TensorRT chooses its reduction order after all."""
    return {"op_type": node.op_type, "node": _node_name(prefix, node),
            "kind": _CATEGORY_KINDS.get(contract.op(node.op_type).category, "reduction"),
            "where": "model", "expanded": "no TensorRT plugin yet"}


def _sensitive_entry(prefix: str, node, producers: dict, constants: set) -> dict:
    kind = "recurrence" if prefix else _kind(node, producers, constants)  # inside a Scan/Loop body
    entry = {"op_type": node.op_type, "node": _node_name(prefix, node), "kind": kind, "where": "model"}
    if kind == "float projection":
        entry["weight"] = next(i for i in node.input[:2] if i in constants)
    return entry


def _graph_nodes(graph) -> tuple[list, dict, set]:
    """Every (subgraph prefix, node), the producer of each value, and the constant values."""
    nodes: list = []
    _walk(graph, "", nodes)
    producers = {o: n for _, n in nodes for o in n.output}
    constants = {t.name for t in graph.initializer} | {
        o for _, n in nodes if n.op_type == "Constant" for o in n.output}
    return nodes, producers, constants


def audit(graph) -> dict:
    """``covers``: the metrale projections whose outputs the promise is about (name and output);
    ``left_to_tensorrt``: every other row-sensitive node with its kind and the layer it sits in
    (the layer of the next projection in graph order, 'model' after the last); ``left_by_kind``."""
    nodes, producers, constants = _graph_nodes(graph)
    covers, left, pending = [], [], []
    for prefix, node in nodes:
        if node.domain == DOMAIN and not _unplugged(node.op_type):
            name = onnx_nodes.attribute(node, "name") or node.name
            covers.append({"name": name, "op_type": node.op_type, "output": node.output[0]})
            for entry in pending:
                entry["where"] = _layer_of(name)
            pending = []
            continue
        if node.domain == DOMAIN:
            entry = _expanded_entry(prefix, node)
        elif _sensitive(node.op_type):
            entry = _sensitive_entry(prefix, node, producers, constants)
        else:
            continue
        left.append(entry)
        pending.append(entry)
    by_kind = Counter(e["kind"] for e in left)
    return {"covers": covers, "left_to_tensorrt": left, "left_by_kind": dict(sorted(by_kind.items()))}


def describe_left(audit_: dict) -> str:
    """'4 attention (MatMul, Softmax), 5 norm (ReduceMean), 1 float projection (Gemm lm_head.weight)'.
    At most ``NAMED_WEIGHTS`` weights are named per kind, then how many more (an unquantized MoE
    export leaves hundreds); the manifest's ``left_to_tensorrt`` lists every one."""
    parts = []
    for kind, count in audit_.get("left_by_kind", {}).items():
        entries = [e for e in audit_.get("left_to_tensorrt", []) if e["kind"] == kind]
        ops = sorted({e["op_type"] for e in entries})
        weights = sorted({e["weight"] for e in entries if "weight" in e})
        named = ", ".join(weights[:NAMED_WEIGHTS])
        if len(weights) > NAMED_WEIGHTS:
            named += f" and {len(weights) - NAMED_WEIGHTS} more"
        parts.append(f"{count} {kind} ({', '.join(ops)}{' ' + named if weights else ''})")
    return ", ".join(parts) or "nothing"



def engine_promise(audit_: dict, policy_promised: bool, policy_reason: str) -> dict:
    """The engine manifest's ``row_invariance``: ``promised`` only when the policy and lowering allow
    it and no row-sensitive op is left to TensorRT; otherwise ``scope`` says what still holds."""
    left = audit_.get("left_to_tensorrt", [])
    covered = [c["name"] for c in audit_.get("covers", [])]
    if not policy_promised:
        promised, scope, reason = False, "none", policy_reason
    elif left:
        promised, scope = False, PROJECTIONS_ONLY
        reason = (f"{PROJECTIONS_ONLY}: the {len(covered)} metrale projections' outputs are bitwise "
                  f"row-invariant ({policy_reason}); left to TensorRT, with tactics chosen per profile: "
                  f"{describe_left(audit_)}")
    else:
        promised, scope, reason = True, "whole graph", policy_reason
    return {"promised": promised, "scope": scope, "reason": reason,
            "covers": covered if policy_promised else [],
            "left_to_tensorrt": left, "left_by_kind": audit_.get("left_by_kind", {})}
