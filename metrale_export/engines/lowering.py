"""Graph rewrites before a build: the standard-ONNX ``qdq`` lowering and the plugin path's formats.

``lower_qdq`` replaces every ``metrale`` node (docs/ops.md) with standard ONNX that TensorRT builds
with no plugin: DequantizeLinear of the stored weights + MatMul, with the activation formats
emulated as the contract defines them (qdq/: how each weight format is stored, a module
each, and each activation format computed). ``lower_plugins`` is the plugin path's rewrite (below);
``with_activation_formats`` only sets the projections' ``activation_format`` on a copy.

The non-projection ops (Attention, RMSNorm, FloatProj, Router) expand to their formulas in
standard ONNX (``expand.EXPANSIONS``, one rewrite per op type: MatMul, Softmax, ReduceMean and
TopK, whose reduction orders TensorRT chooses per tactic: what the qdq lowering does not promise).
``lower_plugins`` is the plugin lowering: one ``PLUGIN_REWRITES`` entry per kind of rewrite (set
the activation format, keep the plugin, or expand an op that has no plugin yet through the same
``expand.EXPANSIONS``).

Invariants: the lowered graph computes docs/ops.md's formulas up to the float32 accumulation order
(and, for fp8, float32 reassociation of the scales); it has no ``metrale`` node left; the default
opset becomes at least 21 (blocked DequantizeLinear, INT4) and the IR version at least 10.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.logger import G_LOGGER as _GS_LOGGER

from .. import contract
from . import expand
from .emitter import Emitter
from ..onnx_nodes import attributes
from .nodes import DOMAIN, LoweringError, _key, _key_gs, contract_attributes, metrale_ops
from .qdq import lower_projection

LOWERING_VERSION = 2  # bump when the qdq output changes, so cached engines rebuild
MIN_OPSET = 21
MIN_IR_VERSION = 10
_EXTERNAL_DATA_BYTES = 1 << 30  # save initializers to a side file above this


def with_activation_formats(model: onnx.ModelProto, formats: dict[str, str]) -> onnx.ModelProto:
    """A copy of ``model`` whose metrale projection nodes carry ``activation_format = formats[key]``
    (the first of the plugin lowering's rewrites; ``lower_plugins`` applies them all)."""
    out = copy.deepcopy(model)
    for i, node in enumerate(out.graph.node):
        if node.domain != DOMAIN or not contract.op(node.op_type).is_projection:
            continue
        key = _key(node, attributes(node), i)
        if key not in formats:
            raise LoweringError(f"node {key}: no activation format chosen for it")
        for attr in node.attribute:
            if attr.name == "activation_format":
                attr.s = formats[key].encode()
    return out


# --- the plugin lowering: one entry per kind of rewrite -----------------------------------------


@dataclass(frozen=True)
class PluginRewrite:
    """One entry of the plugin lowering: ``can(spec)`` says whether it takes a node of that op
    (and why not); ``action`` what it does: "format" (the node stays a plugin, its
    activation_format set from the policy's choice), "plugin" (the node stays a plugin as
    exported) or "standard" (expanded to standard ONNX as the qdq lowering does: no plugin, so
    TensorRT chooses its reduction order, and ``invariance.audit`` lists it as left)."""

    name: str
    can: Callable[[contract.OpSpec], tuple[bool, str]]
    action: str


def _is_projection(spec):
    return spec.is_projection, "a quantized projection" if spec.is_projection else "not a projection"


def _has_plugin(spec):
    return spec.has_plugin, "a TensorRT plugin" if spec.has_plugin else f"{spec.op_type} has no TensorRT plugin yet"


def _expandable(spec):
    ok = spec.op_type in expand.EXPANSIONS
    return ok, "expanded to standard ONNX" if ok else f"{spec.op_type} has no standard-ONNX expansion"


# In priority order: the first entry whose ``can`` holds takes the node. An op that gets a plugin
# (Attention, RMSNorm, ... once ``has_plugin``) moves from the third entry to the second.
PLUGIN_REWRITES: list[PluginRewrite] = [
    PluginRewrite("activation format", _is_projection, "format"),
    PluginRewrite("plugin as exported", _has_plugin, "plugin"),
    PluginRewrite("standard ONNX (no plugin yet)", _expandable, "standard"),
]


def plugin_plan(model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """Node key -> (action, the entry's name) for every metrale node of the main graph, or a
    LoweringError naming a node no entry takes, with each entry's reason."""
    plan = {}
    for i, node in enumerate(model.graph.node):
        if node.domain != DOMAIN:
            continue
        key = _key(node, attributes(node), i)
        spec = contract.op(node.op_type) if node.op_type in contract.OPS else None
        if spec is None:
            contract_attributes(node.op_type, attributes(node), key)  # raises: unknown op type
        reasons = []
        for entry in PLUGIN_REWRITES:
            ok, why = entry.can(spec)
            if ok:
                plan[key] = (entry.action, entry.name)
                break
            reasons.append(f"{entry.name}: {why}")
        else:
            raise LoweringError(f"node {key} ({node.op_type}): the plugin lowering cannot take it ({'; '.join(reasons)})")
    return plan


def lower_plugins(model: onnx.ModelProto, formats: dict[str, str]) -> onnx.ModelProto:
    """The plugin lowering: a copy of ``model`` in which each metrale node is rewritten by its
    ``PLUGIN_REWRITES`` entry (``plugin_plan``): projections get ``formats[key]``, plugins stay as
    exported, the others are expanded to standard ONNX (``expand.EXPANSIONS``)."""
    plan = plugin_plan(model)
    out = with_activation_formats(model, formats)
    standard = {k for k, (action, _) in plan.items() if action == "standard"}
    if not standard:
        return out
    quiet = (_GS_LOGGER.severity, _GS_LOGGER.colors)
    _GS_LOGGER.severity, _GS_LOGGER.colors = _GS_LOGGER.ERROR, False
    try:
        return _expand_nodes(out, standard)
    finally:
        _GS_LOGGER.severity, _GS_LOGGER.colors = quiet


def _finish(model: onnx.ModelProto, out: onnx.ModelProto, raise_opset: bool) -> onnx.ModelProto:
    """``out``'s opsets and IR version after a rewrite of ``model``: the default opset at least
    MIN_OPSET when ``raise_opset``, the metrale domain dropped when no metrale node is left."""
    opsets = {o.domain: o.version for o in out.opset_import}
    if raise_opset:
        opsets[""] = max(opsets.get("", MIN_OPSET), MIN_OPSET)
    if not any(n.domain == DOMAIN for n in out.graph.node):
        opsets.pop(DOMAIN, None)
    del out.opset_import[:]
    out.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in sorted(opsets.items()))
    out.ir_version = max(model.ir_version, MIN_IR_VERSION)
    return out


def lower_qdq(model: onnx.ModelProto, formats: dict[str, str] | None = None, store=None) -> onnx.ModelProto:
    """A new model with every metrale node replaced by standard ONNX (module docstring).

    ``formats`` maps op keys (``metrale_ops``) to activation formats; ``None`` keeps each node's
    ``activation_format``. Formats outside the contract's table are refused. With ``store`` (a
    ``weights_file.WeightsFile``), ``model`` may be a header whose weights stay in their files:
    each is read when its node is lowered, and the lowered weights are written to ``store``.
    """
    # gs warns that it keeps FLOAT8E4M3FN constants as ONNX tensors: that is what we want.
    quiet = (_GS_LOGGER.severity, _GS_LOGGER.colors)
    _GS_LOGGER.severity, _GS_LOGGER.colors = _GS_LOGGER.ERROR, False
    try:
        return _lower_qdq(model, formats, store)
    finally:
        _GS_LOGGER.severity, _GS_LOGGER.colors = quiet


def _lower_qdq(model: onnx.ModelProto, formats: dict[str, str] | None, store=None) -> onnx.ModelProto:
    ops = {op.key: op for op in metrale_ops(model)}
    _refuse_grouped(ops.values())
    graph = gs.import_onnx(model)
    if store is not None:
        store.attach(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if node.domain != DOMAIN:
            continue
        key = _key_gs(node, dict(node.attrs), index[id(node)])
        a = contract_attributes(node.op, dict(node.attrs), key)
        if not contract.op(node.op).is_projection:
            if node.op not in expand.EXPANSIONS:
                raise LoweringError(f"node {key} ({node.op}): the qdq lowering has no standard-ONNX "
                                    f"expansion of it; build with the plugin backend")
            _expand_node(graph, node, a, key, store)
            continue
        fmt = formats.get(key) if formats is not None else ops[key].activation_format
        lower_projection(graph, node, a, key, _allowed_format(node.op, key, fmt), store)
    graph.cleanup().toposort()
    return _finish(model, gs.export_onnx(graph), raise_opset=True)


def _refuse_grouped(ops) -> None:
    grouped = [op for op in ops if contract.op(op.op_type).grouped_of is not None]
    if grouped:
        op = grouped[0]
        raise LoweringError(
            f"node {op.key} ({op.op_type}) and {len(grouped) - 1} more grouped-expert nodes: the qdq "
            "lowering does not express the grouped-expert ops. Standard ONNX can route rows to experts "
            "only through data-dependent shapes (NonZero and a gather per expert) or by running every "
            "expert on every row (num_experts / top_k times the weight reads), and a static "
            "DequantizeLinear of an [E, N, K] weight followed by a per-row Gather materializes "
            "[M, top_k, N, K]; neither keeps what the op is for. Build with the plugin backend, or "
            "export this model with --moe-experts dense (one W*Proj node per expert), which lowers."
        )


def _allowed_format(op_type: str, key: str, fmt: str | None) -> str:
    if fmt is None:
        raise LoweringError(f"node {key}: no activation format chosen for it")
    allowed = contract.op(op_type).activation_formats
    if fmt not in allowed:
        raise LoweringError(
            f"node {key} ({op_type}): activation format {fmt!r} is not in the op contract's "
            f"table; {op_type} runs {' or '.join(allowed)}"
        )
    return fmt


def _expand_node(graph: gs.Graph, node: gs.Node, a: dict, key: str, store=None) -> None:
    """Replace ``node`` by its ``expand.EXPANSIONS`` rewrite, writing the node's outputs (an absent
    optional output is a new tensor nothing reads)."""
    ins, outs = list(node.inputs), list(node.outputs)
    outs += [None] * (len(contract.op(node.op).outputs) - len(outs))
    node.inputs.clear()
    node.outputs.clear()
    expand.EXPANSIONS[node.op](Emitter(graph, key, store), ins, outs, a, key)
    if store is not None:
        store.release(ins)


def _expand_nodes(model: onnx.ModelProto, keys: set[str]) -> onnx.ModelProto:
    """``model`` with the metrale nodes named by ``keys`` expanded to standard ONNX (``expand``)."""
    graph = gs.import_onnx(model)
    for i, node in enumerate(list(graph.nodes)):
        if node.domain != DOMAIN:
            continue
        key = _key_gs(node, dict(node.attrs), i)
        if key in keys:
            _expand_node(graph, node, contract_attributes(node.op, dict(node.attrs), key), key)
    graph.cleanup().toposort()
    return _finish(model, gs.export_onnx(graph), raise_opset=False)


def save_model(model: onnx.ModelProto, path: Path) -> None:
    """Write ``model`` to ``path``, initializers in ``<name>.data`` beside it when large."""
    path = Path(path)
    size = sum(len(t.raw_data) for t in model.graph.initializer)
    if size > _EXTERNAL_DATA_BYTES:
        onnx.save_model(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
            location=path.name + ".data", size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))
