"""Standard-ONNX expansions of the metrale ops that are not projections (docs/ops.md), one rewrite
per op type in ``EXPANSIONS``.

The qdq lowering expands every such node (TensorRT-RTX builds no plugin); the plugin lowering
expands those the contract marks ``has_plugin=False`` (no TensorRT plugin yet), so a graph that
carries the op still builds. An expanded node computes the op's formula with standard ops whose
reduction order TensorRT chooses per tactic: it keeps the values (within the op's bound), not the
op's batch and chunking invariance, and ``invariance.audit`` then lists those ops as left to
TensorRT.

Invariants: an expansion reads only the node's inputs and contract attributes, writes the node's
outputs under their names (consumers are untouched) and leaves no metrale node of that type.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from .. import contract

_MASKED = float(np.finfo(np.float32).min)  # the exporter's masked score (torch.finfo min)


def expand_attention(e, inputs: list, outputs: list, a: dict) -> None:
    """Attention as MatMul / Where / Softmax in float32 (docs/ops.md, "Attention"): the G query
    heads of a kv head share its keys through a broadcast MatMul (no repeated cache), query i of S
    sees keys 0 .. T - S + i. ``e`` is lowering's emitter; ``inputs`` / ``outputs`` the node's,
    detached from it."""
    q_in, k_in, v_in = inputs[0], inputs[1], inputs[2]
    y = outputs[0]
    hq, hkv, d = int(a["q_heads"]), int(a["kv_heads"]), int(a["head_dim"])
    g = hq // hkv
    f32 = {"to": TensorProto.FLOAT}
    q = e.op("Cast", [q_in], f32)
    k = e.op("Cast", [k_in], f32)
    v = e.op("Cast", [v_in], f32)
    # q [B, Hq, S, D] -> [B, Hkv, G, S, D]; k, v [B, Hkv, T, D] -> [B, Hkv, 1, T, D].
    q5 = e.op("Reshape", [q, e.i64("shape", [0, hkv, g, -1, d])])
    k5 = e.op("Unsqueeze", [k, e.i64("axes", [2])])
    v5 = e.op("Unsqueeze", [v, e.i64("axes", [2])])
    kt = e.op("Transpose", [k5], {"perm": [0, 1, 2, 4, 3]})
    scores = e.op("Mul", [e.op("MatMul", [q5, kt]), e.f32("scale", np.float32(a["scale"]))])
    # The causal mask [S, T]: key j allowed for query i iff j <= T - S + i.
    s_len = e.op("Gather", [e.op("Shape", [q]), e.i64("two", 2)], {"axis": 0})
    t_len = e.op("Gather", [e.op("Shape", [k]), e.i64("two", 2)], {"axis": 0})
    zero, one = e.i64("zero", 0), e.i64("one", 1)
    pos = e.op("Add", [e.op("Range", [zero, s_len, one]), e.op("Sub", [t_len, s_len])])
    keys = e.op("Range", [zero, t_len, one])
    allowed = e.op("LessOrEqual", [e.op("Unsqueeze", [keys, e.i64("axes", [0])]),
                                   e.op("Unsqueeze", [pos, e.i64("axes", [1])])])
    masked = e.op("Where", [allowed, scores, e.f32("masked", _MASKED)])
    probs = e.op("Softmax", [masked], {"axis": -1})
    out5 = e.op("MatMul", [probs, v5])  # [B, Hkv, G, S, D]
    out4 = e.op("Reshape", [out5, e.i64("shape", [0, hq, -1, d])])
    out = e.op("Transpose", [out4], {"perm": [0, 2, 1, 3]})  # [B, S, Hq, D]
    e.op("CastLike", [out, q_in], out=y)


EXPANSIONS = {"Attention": expand_attention}


def expanded_op_types(plugin_path: bool) -> tuple[str, ...]:
    """The op types a lowering expands: every non-projection op with an expansion (qdq), or only
    those without a TensorRT plugin (the plugin path)."""
    return tuple(t for t in EXPANSIONS if not plugin_path or not contract.op(t).has_plugin)
