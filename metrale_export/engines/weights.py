"""An engine's float weights in the checkpoint's dtype, and what its weights take and a decode reads.

The export keeps its float parts (embedding, lm_head, router, norms) in float32 because ONNX
Runtime's CPU reference runs float32 (docs/ops.md). Their values come from a bfloat16 checkpoint,
so every one is exact in bfloat16: ``float_weights_in_bf16`` stores those tensors in bfloat16 in
the graph an engine is built from, which halves their bytes and their reads. TensorRT folds a Cast
of a constant into a float32 constant (measured: a bf16 weight cast to float32 before a MatMul
builds a float32-sized engine), so the rewrite puts the bfloat16 tensor where it is consumed:
- ``Gather`` (the embedding) reads bfloat16 rows and casts them to float32: exact, the same values;
- ``MatMul``/``Gemm`` with a constant weight (lm_head, router, shared-expert gate) run in bfloat16:
  the activation is rounded to bfloat16, products are exact and accumulate in float32 inside
  TensorRT's GEMM, and the result is rounded to bfloat16 before it is cast back. That is the
  checkpoint's own bfloat16 arithmetic (transformers in bfloat16 runs the same layers so).
Tensors that are not exact in bfloat16 (a float32 or float16 checkpoint) are left as they are, and
so are the norms' and other small constants' Mul operands (TensorRT folds them to float32; a norm
weight is hidden_size values).

``footprint`` counts the bytes of a graph's initializers (what the engine stores: measured within
0.5 MB of the engine file for weight-dominated graphs) and the bytes one decode step reads per
token at batch 1: every weight once, except a Gather table (one row per token) and the grouped
expert ops' weights (``top_k / num_experts`` of them). ``state_bytes`` gives the KV cache bytes
each context position adds to a decode step and the fixed per-sequence states (GDN).

Invariants: values never change except by the bfloat16 arithmetic of the MatMul/Gemm above; a
tensor is converted only if every one of its values is exact in bfloat16; pure functions of the
ONNX model (no TensorRT, no files).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import uses_external_data

from .weights_file import initializers as _initializers

from .policy import FLOAT_WEIGHTS  # noqa: F401 - --float-weights: bf16 where exact, or as exported

_BITS = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4}


def _exact_bf16(t: onnx.TensorProto) -> np.ndarray | None:
    """The bfloat16 bits of a float32 tensor, or None if a value is not exact in bfloat16."""
    if t.data_type != TensorProto.FLOAT or len(t.dims) != 2:
        return None
    bits = numpy_helper.to_array(t).view(np.uint32)
    if (bits & 0xFFFF).any():
        return None
    return (bits >> 16).astype(np.uint16)


def _used_names(graph: onnx.GraphProto, out: set) -> set:
    for node in graph.node:
        out.update(node.input)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _used_names(a.g, out)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    _used_names(g, out)
    return out


def _exact_bf16_external(t: onnx.TensorProto, store) -> bool:
    """Whether every value of a float32 tensor stored in a file (the source's, or the store's for a
    tensor the lowering made) is exact in bfloat16, read in chunks (``WeightsFile.chunks``): the
    tensor is never whole in memory."""
    if t.data_type != TensorProto.FLOAT or len(t.dims) != 2:
        return False
    return not any((c & 0xFFFF).any() for c in store.chunks(t, np.uint32))


def float_weights_in_bf16(model: onnx.ModelProto, store=None) -> tuple[onnx.ModelProto, list[str]]:
    """``model`` (rewritten in place) with its bf16-exact float weights in bfloat16, and their names.

    With ``store`` (a ``weights_file.WeightsFile``), tensors in the source's files are checked and
    converted in chunks and the bfloat16 tensors are written to ``store`` as they are made."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    made: dict[str, str | None] = {}

    def bf16(name: str) -> str | None:
        if name not in made:
            t = inits.get(name)
            made[name] = None
            if t is not None and store is not None and uses_external_data(t):
                if _exact_bf16_external(t, store):
                    new = TensorProto(name=f"{name}.bf16", data_type=TensorProto.BFLOAT16, dims=list(t.dims))
                    chunks = ((c >> 16).astype(np.uint16) for c in store.chunks(t, np.uint32))
                    graph.initializer.append(store.write_chunks(new, chunks))
                    made[name] = new.name
                return made[name]
            bits = _exact_bf16(t) if t is not None else None
            if bits is not None:
                new = helper.make_tensor(f"{name}.bf16", TensorProto.BFLOAT16, list(t.dims),
                                         bits.tobytes(), raw=True)
                graph.initializer.append(store.write_tensor(new) if store is not None else new)
                made[name] = new.name
        return made[name]

    nodes = []
    for node in graph.node:
        rewritten = _rewrite(node, bf16, inits) if node.domain in ("", "ai.onnx") else None
        nodes.extend(rewritten or [node])
    del graph.node[:]
    graph.node.extend(nodes)
    used = _used_names(graph, set())
    converted = [name for name, new in made.items() if new is not None]
    kept = [t for t in graph.initializer if t.name in used or t.name not in made]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model, converted


def _to_float32(node: onnx.NodeProto, dst: str) -> onnx.NodeProto:
    out = node.output[0]
    return helper.make_node("Cast", [f"{out}/bf16"], [dst], name=f"{node.name}/to_float32", to=TensorProto.FLOAT)


def _rewrite(node: onnx.NodeProto, bf16, inits) -> list[onnx.NodeProto] | None:
    """The nodes replacing ``node`` with its constant float weight in bfloat16, or None."""
    if node.op_type == "Gather" and len(node.input) == 2 and node.input[1] not in inits:
        return _rewrite_gather(node, bf16)
    if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[0] in inits:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gemm" and not _plain_gemm(node, attrs):
        return None
    return _rewrite_matmul(node, attrs, bf16)


def _rewrite_gather(node: onnx.NodeProto, bf16) -> list[onnx.NodeProto] | None:
    table = bf16(node.input[0])
    if table is None:
        return None
    g = helper.make_node("Gather", [table, node.input[1]], [f"{node.output[0]}/bf16"], name=f"{node.name}/bf16")
    g.attribute.extend(node.attribute)
    return [g, _to_float32(node, node.output[0])]


def _plain_gemm(node: onnx.NodeProto, attrs: dict) -> bool:
    """A Gemm that is a MatMul (with an optional bias): no transA, no alpha, no scaled bias."""
    scaled_bias = len(node.input) > 2 and attrs.get("beta", 1.0) != 1.0
    return not (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or scaled_bias)


def _rewrite_matmul(node: onnx.NodeProto, attrs: dict, bf16) -> list[onnx.NodeProto] | None:
    weight = bf16(node.input[1])
    if weight is None:
        return None
    out = node.output[0]
    x = helper.make_node("Cast", [node.input[0]], [f"{out}/x_bf16"], name=f"{node.name}/x_to_bf16",
                         to=TensorProto.BFLOAT16)
    mm = helper.make_node(node.op_type, [f"{out}/x_bf16", weight], [f"{out}/bf16"], name=f"{node.name}/bf16")
    if node.op_type == "Gemm" and attrs.get("transB", 0):
        mm.attribute.append(helper.make_attribute("transB", 1))
    bias = node.input[2] if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] else None
    if bias is None:
        return [x, mm, _to_float32(node, out)]
    # A float32 bias is added after the cast back, as the float32 graph adds it.
    add = helper.make_node("Add", [f"{out}/nobias", bias], [out], name=f"{node.name}/bias")
    return [x, mm, _to_float32(node, f"{out}/nobias"), add]


# --- what the weights take and what a decode step reads ----------------------------------------

def tensor_bytes(t: onnx.TensorProto) -> int:
    numel = int(np.prod(t.dims)) if len(t.dims) else 1
    bits = _BITS.get(t.data_type)
    if bits is None:
        bits = 8 * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    return (numel * bits + 7) // 8


def _consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """Value name -> the (node, input position) pairs that read it."""
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, i))
    return consumers


def _decode_bytes(t: onnx.TensorProto, size: int, uses: list[tuple[onnx.NodeProto, int]]) -> float:
    """What one decode step reads of initializer ``t`` (``size`` bytes) with these consumers."""
    if uses and all(n.op_type == "Gather" and i == 0 for n, i in uses) and t.dims:
        return size / t.dims[0]  # a table: one row per token
    share = 1.0
    for n, _ in uses:
        share = _routed_share(n, share)
    return size * share


def _routed_share(node: onnx.NodeProto, share: float) -> float:
    """The share of a grouped-expert node's weights one token reads (only the routed experts);
    ``share`` for any other node."""
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    if "num_experts" in a and "top_k" in a and int(a["num_experts"]) > 0:
        return min(1.0, int(a["top_k"]) / int(a["num_experts"]))
    return share


def footprint(model: onnx.ModelProto) -> dict:
    """``weights`` (bytes in all and by dtype) and ``decode_bytes_per_token`` (batch 1)."""
    graph = model.graph
    consumers = _consumers(graph)
    total, by_dtype, decode = 0, {}, 0.0
    for t in _initializers(graph):
        size = tensor_bytes(t)
        total += size
        dtype = TensorProto.DataType.Name(t.data_type).lower()
        by_dtype[dtype] = by_dtype.get(dtype, 0) + size
        decode += _decode_bytes(t, size, consumers.get(t.name, []))
    return {"weights": {"bytes": total, "by_dtype": dict(sorted(by_dtype.items()))},
            "decode_bytes_per_token": int(round(decode))}


def _state_input(vi: onnx.ValueInfoProto) -> tuple[int, bool] | None:
    """A state input's bytes per sequence (per context position when it has a ``past`` axis) and
    whether it has one; None for the token inputs and inputs without a leading ``batch`` axis or
    with another symbolic axis."""
    t = vi.type.tensor_type
    dims = [d.dim_param or d.dim_value for d in t.shape.dim]
    if vi.name in ("input_ids", "position_ids") or not dims or dims[0] != "batch":
        return None
    rest = dims[1:]
    if any(isinstance(d, str) and d != "past" for d in rest):
        return None
    return _per_sequence_bytes(rest, t.elem_type), "past" in rest


def _per_sequence_bytes(dims: list, elem_type: int) -> int:
    """The bytes of one sequence's slice of a state: its static ``dims`` (``past`` counts as 1)."""
    n = int(np.prod([d for d in dims if isinstance(d, int)] or [1]))
    return n * helper.tensor_dtype_to_np_dtype(elem_type).itemsize


def state_bytes(model: onnx.ModelProto) -> dict:
    """Per sequence: the KV cache bytes each context position adds (inputs with a ``past`` axis) and
    the fixed states' bytes (GDN's conv and recurrent states), from the graph's inputs."""
    per_position, fixed = 0, 0
    for vi in model.graph.input:
        state = _state_input(vi)
        if state is None:
            continue
        n, per_past = state
        if per_past:
            per_position += n
        else:
            fixed += n
    return {"kv_cache_bytes_per_position": per_position, "fixed_state_bytes": fixed}


def numbers(model: onnx.ModelProto) -> dict:
    """What an engine built from ``model`` stores and reads (``footprint`` and ``state_bytes``)."""
    return {**footprint(model), **state_bytes(model)}
