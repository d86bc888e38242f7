"""Small synthetic ONNX graphs of metrale nodes, for tests and for trying a backend quickly.

``projection_graph`` chains projections ``x [M, K0] -> ... -> y [M, Kn]`` with weights made by the
quantizers of ``metrale_export.ops`` from seeded random floats; ``reference`` evaluates the same
chain with the CPU reference ops. Invariants: the nodes follow docs/ops.md exactly (inputs,
attributes, the ``metrale`` domain at version 1), and the graph's one dynamic dimension is ``M``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from metrale_export import contract
from metrale_export.ops import w4a4, w4a16, w8a8

MODEL_OPSET = 21


@dataclass(frozen=True)
class Proj:
    """One projection of a synthetic chain: ``op_type`` with output width ``n``."""

    op_type: str
    n: int
    family: str = "ffn"
    activation_format: str | None = None  # None: the op's default
    bias: bool = False
    options: dict = field(default_factory=dict)  # group_size, symmetric, granularity, ...


@dataclass
class Chain:
    """A built chain: the ONNX model and what ``reference`` needs to evaluate it."""

    model: onnx.ModelProto
    k: int
    layers: list  # (Proj, key, weights dict, format)


_DEFAULT_FORMAT = {t: spec.default_activation for t, spec in contract.OPS.items()}


def _i8(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int8).numpy().copy()


def _bf16(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()


def projection_graph(k: int, projs: list[Proj], seed: int = 0, input_name: str = "x",
                     dtype: int = TensorProto.FLOAT) -> Chain:
    """The chain ``projs`` applied to ``x [M, k]``, in and out in ``dtype`` (an ONNX type)."""
    gen = torch.Generator().manual_seed(seed)
    nodes, inits, layers = [], [], []
    cur, width = input_name, k
    for i, p in enumerate(projs):
        key = f"layers.{i}.{p.family}.{p.op_type.lower()}"
        w = torch.randn(p.n, width, generator=gen) * 0.05
        fmt = p.activation_format or _DEFAULT_FORMAT[p.op_type]
        attrs = {"n": p.n, "k": width, "activation_format": fmt, "family": p.family,
                 "name": key, "has_bias": int(p.bias)}
        names = [cur]

        def add(suffix, arr):
            name = f"{key}.{suffix}"
            inits.append(numpy_helper.from_array(arr, name))
            names.append(name)

        weights: dict = {}
        if p.op_type == "W4A16Proj":
            q = w4a16.quantize(w, p.options.get("group_size", 32), p.options.get("symmetric", True))
            attrs.update(group_size=q.group_size, has_zero_point=int(q.zero_point is not None))
            if contract.names_plugin_version(contract.op("W4A16Proj")):
                attrs["plugin_version"] = str(contract.op("W4A16Proj").version)
            add("weight", _i8(q.weight))
            add("weight_scale", _bf16(q.weight_scale))
            if q.zero_point is not None:
                add("zero_point", _i8(q.zero_point))
            weights = dict(weight=q.weight, weight_scale=q.weight_scale, zero_point=q.zero_point,
                           group_size=q.group_size)
        elif p.op_type == "W8A8Proj":
            q = w8a8.quantize(w, p.options.get("granularity", "channel"))
            act = p.options.get("activation_scale_granularity", "row")
            input_scale = p.options.get("input_scale")  # the static scale (granularity tensor)
            if input_scale is not None:
                act = contract.STATIC_ACTIVATION_SCALE
            attrs.update(weight_scale_granularity=q.granularity, activation_scale_granularity=act)
            if contract.names_plugin_version(contract.op("W8A8Proj"), attrs):
                attrs["plugin_version"] = str(contract.op("W8A8Proj").node_version(attrs))
            add("weight", _i8(q.weight))
            add("weight_scale", q.weight_scale.numpy())
            if input_scale is not None:
                add("input_scale", np.array([input_scale], dtype=np.float32))
            weights = dict(weight=q.weight, weight_scale=q.weight_scale,
                           weight_scale_granularity=q.granularity, activation_scale_granularity=act,
                           input_scale=None if input_scale is None
                           else torch.tensor([input_scale], dtype=torch.float32))
        elif p.op_type == "W4A4Proj":
            q = w4a4.quantize(w)
            input_scale = p.options.get("input_scale")
            attrs.update(has_input_scale=int(input_scale is not None))
            add("weight", _i8(q.weight))
            add("weight_scale", _i8(q.weight_scale))
            add("weight_global_scale", q.weight_global_scale.numpy())
            if input_scale is not None:
                add("input_scale", np.array([input_scale], dtype=np.float32))
            weights = dict(weight=q.weight, weight_scale=q.weight_scale,
                           weight_global_scale=q.weight_global_scale,
                           input_scale=None if input_scale is None
                           else torch.tensor([input_scale], dtype=torch.float32))
        else:
            raise ValueError(f"unknown op type {p.op_type!r}")
        bias = None
        if p.bias:
            bias = torch.randn(p.n, generator=gen) * 0.1
            add("bias", bias.numpy())
        weights["bias"] = bias
        out = "y" if i == len(projs) - 1 else f"h{i}"
        node = helper.make_node(p.op_type, names, [out], name=key, domain=contract.DOMAIN)
        # ``name`` is also make_node's own keyword: add the attributes afterwards.
        node.attribute.extend(helper.make_attribute(a, v) for a, v in attrs.items())
        nodes.append(node)
        layers.append((p, key, weights, fmt))
        cur, width = out, p.n
    graph = helper.make_graph(
        nodes, "metrale_chain",
        [helper.make_tensor_value_info(input_name, dtype, ["M", k])],
        [helper.make_tensor_value_info("y", dtype, ["M", width])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", MODEL_OPSET), helper.make_opsetid(contract.DOMAIN, contract.domain_version())],
        producer_name="metrale-export-tests",
    )
    model.ir_version = 10
    return Chain(model, k, layers)


def reference(chain: Chain, x: torch.Tensor, formats: dict[str, str] | None = None) -> torch.Tensor:
    """The chain through the CPU reference ops (in x's dtype), with optional per-key formats."""
    h = x
    for p, key, wts, fmt in chain.layers:
        fmt = (formats or {}).get(key, fmt)
        if p.op_type == "W4A16Proj":
            h = w4a16.proj(h, wts["weight"], wts["weight_scale"], wts["zero_point"], wts["bias"],
                           wts["group_size"], fmt)
        elif p.op_type == "W8A8Proj":
            h = w8a8.proj(h, wts["weight"], wts["weight_scale"], wts["bias"],
                          wts["weight_scale_granularity"], fmt, wts["activation_scale_granularity"],
                          wts["input_scale"])
        else:
            h = w4a4.proj(h, wts["weight"], wts["weight_scale"], wts["weight_global_scale"],
                          wts["input_scale"], wts["bias"], fmt)
    return h


def model_graph(hidden: int = 64, vocab: int = 96, kv_heads: int = 2, head_dim: int = 16,
                layers: int = 1, seed: int = 0) -> onnx.ModelProto:
    """A toy graph with the exported model's interface (docs/engines.md) and metrale projections.

    ``input_ids``/``position_ids`` [batch, seq] -> embedding (+ position) -> per layer a W4A16Proj
    ``k`` projection appended to ``past_key.i`` and a W8A8Proj ``v`` projection appended to
    ``past_value.i`` -> a W4A4Proj head -> ``logits`` [batch, seq, vocab]. Every projection sees
    M = batch * seq rows, as in a real export.
    """
    gen = torch.Generator().manual_seed(seed)
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    kv = kv_heads * head_dim
    emb = const("embed.weight", (torch.randn(vocab, hidden, generator=gen) * 0.5).numpy())
    h = node("Gather", [emb, "input_ids"], "embed")
    pos = node("Cast", ["position_ids"], "pos_f", to=TensorProto.FLOAT)
    pos = node("Unsqueeze", [pos, const("axes_2", np.array([2], np.int64))], "pos_u")
    h = node("Add", [h, node("Mul", [pos, const("pos_scale", np.float32(1e-3))], "pos_s")], "h0")
    bs = node("Slice", [node("Shape", ["input_ids"], "ids_shape"), const("zero1", np.array([0], np.int64)),
                        const("two1", np.array([2], np.int64))], "batch_seq")
    rows = node("Reshape", [h, const("rows_shape", np.array([-1, hidden], np.int64))], "rows")

    def proj(op_type, x, n, k, key, family):
        chain = projection_graph(k, [Proj(op_type, n, family=family)], seed=seed + len(nodes))
        (n_,) = chain.model.graph.node
        for t in chain.model.graph.initializer:
            t.name = t.name.replace("layers.0", key)
            inits.append(t)
        n_.input[0] = x
        for i in range(1, len(n_.input)):
            n_.input[i] = n_.input[i].replace("layers.0", key)
        n_.output[0] = f"{key}.out"
        n_.name = key
        for a in n_.attribute:
            if a.name == "name":
                a.s = key.encode()
        nodes.append(n_)
        return n_.output[0]

    bshk = node("Concat", [bs, const("kv_tail", np.array([kv_heads, head_dim], np.int64))], "bshk", axis=0)
    outputs = []
    for i in range(layers):
        for which, op_type in (("key", "W4A16Proj"), ("value", "W8A8Proj")):
            y = proj(op_type, rows, kv, hidden, f"layers.{i}.attn.{which[0]}_proj", "attn")
            y = node("Reshape", [y, bshk], f"{which}{i}_bshd")
            y = node("Transpose", [y], f"{which}{i}_bhsd", perm=[0, 2, 1, 3])
            node("Concat", [f"past_{which}.{i}", y], f"present_{which}.{i}", axis=2)
            outputs.append(f"present_{which}.{i}")
    logits = proj("W4A4Proj", rows, vocab, hidden, "lm_head", "head")
    bsv = node("Concat", [bs, const("vocab1", np.array([vocab], np.int64))], "bsv", axis=0)
    node("Reshape", [logits, bsv], "logits")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
              for n in ("input_ids", "position_ids")]
    cache = ["batch", kv_heads, "past", head_dim]
    present = ["batch", kv_heads, "past_plus_seq", head_dim]
    for i in range(layers):
        inputs += [helper.make_tensor_value_info(f"past_{w}.{i}", TensorProto.FLOAT, cache)
                   for w in ("key", "value")]
    outs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab])]
    outs += [helper.make_tensor_value_info(o, TensorProto.FLOAT, present) for o in outputs]
    graph = helper.make_graph(nodes, "metrale_toy_model", inputs, outs, inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", MODEL_OPSET), helper.make_opsetid(contract.DOMAIN, contract.domain_version())],
        producer_name="metrale-export-tests",
    )
    model.ir_version = 10
    return model


def head_graph(vocab: int, hidden: int, seed: int = 5) -> onnx.ModelProto:
    """ids [M] -> Gather(embedding) -> MatMul(lm_head [hidden, vocab]), float32 values exact in bfloat16."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    emb, head = (rng.standard_normal(s).astype(ml_dtypes.bfloat16).astype(np.float32)
                 for s in ((vocab, hidden), (hidden, vocab)))
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("Gather", ["embed.weight", "ids"], ["h"], name="embed"),
         onnx.helper.make_node("MatMul", ["h", "lm_head.weight"], ["logits"], name="lm_head")],
        "head", [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["M"])],
        [onnx.helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["M", vocab])],
        [onnx.numpy_helper.from_array(emb, "embed.weight"), onnx.numpy_helper.from_array(head, "lm_head.weight")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


# A Gated DeltaNet layer's (x, conv_state, ba, state): x and ba by batch and token, the states by batch.
GDN_DYNAMIC_SHAPES = {"x": {0: "batch", 1: "seq"}, "conv_state": {0: "batch"},
                      "ba": {0: "batch", 1: "seq"}, "state": {0: "batch"}}


def traced_graph(module: torch.nn.Module, inputs: tuple, dynamic_shapes: dict) -> onnx.ModelProto:
    """``module`` (calling torch.ops.metrale.*) exported by torch.onnx's dynamo exporter with the
    metrale translation table, its unused inputs removed, as the exporter writes its graphs."""
    from metrale_export.ops import onnx_translation, torch_ops  # noqa: F401  (torch_ops registers the ops)

    ep = torch.onnx.export(module, inputs, dynamo=True, verbose=False,
                           custom_translation_table=onnx_translation.translation_table(),
                           dynamic_shapes=dynamic_shapes)
    model = ep.model_proto
    onnx_translation.compact_inputs(model.graph)
    return model
