"""Standard-ONNX expansions of the metrale ops that are not projections (docs/ops.md), one rewrite
per op type in ``EXPANSIONS``: the one expansion table of both lowerings.

The qdq lowering expands every such node (TensorRT-RTX builds no plugin); the plugin lowering
expands those its ``PLUGIN_REWRITES`` give to standard ONNX (ops the contract marks
``has_plugin=False``: no TensorRT plugin yet), so a graph that carries the op still builds. An expanded node computes the op's formula with standard ops whose
reduction order TensorRT chooses per tactic: it keeps the values (within the op's bound), not the
op's batch and chunking invariance, and ``invariance.audit`` then lists those ops as left to
TensorRT.

Each expansion is ``(e, inputs, outputs, a, key)``: an ``emitter.Emitter``, the node's inputs and
outputs detached from it (an absent optional output is None), its contract attributes and its key.

Invariants: an expansion reads only the node's inputs and contract attributes, writes the node's
outputs under their names (consumers are untouched) and leaves no metrale node of that type.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs
from onnx import TensorProto

from ..contract import GDN_L2NORM_EPS, GDN_SOFTPLUS_THRESHOLD
from .emitter import Emitter


_MASKED = float(np.finfo(np.float32).min)  # the exporter's masked score (torch.finfo min)


def expand_attention(e, inputs: list, outputs: list, a: dict, key: str) -> None:
    """Attention as MatMul / Where / Exp in float32 with the op's roundings (docs/ops.md, "Attention",
    Operands): q, k, v and P = exp(x - max) rounded to the 16-bit operand type (f16 for float16
    inputs, else bf16: float32 inputs too), the row sum l of the unrounded p, y = (P V) / l. The
    G query heads of a kv head share its keys through a broadcast MatMul (no repeated cache), query
    i of S sees keys 0 .. T - S + i. Without the roundings the expansion of a float32 graph was 2e-3
    off the op (a bf16 step), which the fp8 and NVFP4 activation quantizations downstream amplified
    to 3e-2 and 1e-1 at the demo's logits. ``e`` is lowering's emitter; ``inputs`` / ``outputs``
    the node's, detached from it."""
    q_in, k_in, v_in = inputs[0], inputs[1], inputs[2]
    y = outputs[0]
    hq, hkv, d = int(a["q_heads"]), int(a["kv_heads"]), int(a["head_dim"])
    g = hq // hkv
    f32 = {"to": TensorProto.FLOAT}
    operand = _operand_round(e, q_in)
    q = operand(e.op("Cast", [q_in], f32))
    k = operand(e.op("Cast", [k_in], f32))
    v = operand(e.op("Cast", [v_in], f32))
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
    last = e.i64("last", [-1])
    p = e.op("Exp", [e.op("Sub", [masked, e.op("ReduceMax", [masked, last], {"keepdims": 1})])])
    row_sum = e.op("ReduceSum", [p, last], {"keepdims": 1})
    out5 = e.op("Div", [e.op("MatMul", [operand(p), v5]), row_sum])  # [B, Hkv, G, S, D]
    out4 = e.op("Reshape", [out5, e.i64("shape", [0, hq, -1, d])])
    out = e.op("Transpose", [out4], {"perm": [0, 2, 1, 3]})  # [B, S, Hq, D]
    e.op("CastLike", [out, q_in], out=y)


def _operand_round(e, x):
    """The rounding of Attention's tensor-core operands for inputs like ``x``: to float16 for a
    float16 x, else to bf16 (a bf16 x is unchanged by it, a float32 x is rounded as the op does)."""
    if x.dtype in (np.float16, TensorProto.FLOAT16):
        return lambda t: e.op("Cast", [e.op("Cast", [t], {"to": TensorProto.FLOAT16})], {"to": TensorProto.FLOAT})
    return e.bf16_round


# --- the norms, the float projection and the router (docs/ops.md, "Norms, the float projection and
# the router"): the same formulas, with the reduction orders TensorRT's tactics choose ---------------

def _f32(e, t):
    return e.op("Cast", [t], {"to": TensorProto.FLOAT})


def expand_rms_norm(e, inputs: list, outputs: list, a: dict, key: str) -> None:
    """s = x (+ residual) in x's dtype, y = x_dtype(x_dtype(s * rsqrt(mean(s^2) + eps)) * w) (or
    ``(1 + w)`` in float32 with weight_offset), times silu(gate) when gated."""
    x, weight = inputs[0], inputs[1]
    rest = list(inputs[2:])
    residual = rest.pop(0) if a["has_residual"] else None
    gate = rest.pop(0) if a["has_gate"] else None
    s = e.op("Add", [x, residual], out=outputs[1]) if residual is not None else x  # rounded to x's dtype
    h = _f32(e, s)
    ms = e.op("ReduceMean", [e.op("Mul", [h, h]), e.i64("axes", [-1])], {"keepdims": 1})
    r = e.op("Div", [e.f32("one", 1.0), e.op("Sqrt", [e.op("Add", [ms, e.f32("eps", a["epsilon"])])])])
    t = e.op("Mul", [h, r])
    w = _f32(e, weight)
    if a["weight_offset"]:
        u = e.op("Mul", [t, e.op("Add", [w, e.f32("one", 1.0)])])
    else:
        u = e.op("Mul", [_f32(e, e.op("CastLike", [t, x])), w])
    if gate is not None:
        z = _f32(e, gate)
        silu = e.op("Div", [z, e.op("Add", [e.f32("one", 1.0), e.op("Exp", [e.op("Neg", [z])])])])
        u = e.op("Mul", [_f32(e, e.op("CastLike", [u, x])), silu])
    e.op("CastLike", [u, x], out=outputs[0])


def expand_float_proj(e, inputs: list, outputs: list, a: dict, key: str) -> None:
    """MatMul(bf16(x), w) in float32 (both operands exact in bf16: exact products), + bias."""
    n, k = int(a["n"]), int(a["k"])
    weight = e.initializer(inputs[1], "weight", key, "FloatProj", (n, k), ml_dtypes.bfloat16)
    x = inputs[0]
    acc = e.op("MatMul", [e.bf16_round(x), e.f32("w", weight.astype(np.float32).T.copy())])
    if a["has_bias"]:
        bias = e.initializer(inputs[2], "bias", key, "FloatProj", (n,)).astype(np.float32)
        acc = e.op("Add", [acc, e.f32("bias", bias)])
    e.op("CastLike", [acc, x], out=outputs[0])


def expand_router(e, inputs: list, outputs: list, a: dict, key: str) -> None:
    """softmax in float32, TopK (ONNX: among equal values the lower index first, the contract's
    tie rule), optionally renormalized."""
    logits = inputs[0]
    probs = e.op("Softmax", [_f32(e, logits)], {"axis": -1})
    top, idx = e.ops("TopK", [probs, e.i64("k", [int(a["top_k"])])], {"axis": -1, "largest": 1, "sorted": 1},
                     [None, None])
    if a["normalize"]:
        top = e.op("Div", [top, e.op("ReduceSum", [top, e.i64("axes", [-1])], {"keepdims": 1})])
    e.op("Cast", [idx], {"to": TensorProto.INT32}, out=outputs[0])
    e.op("CastLike", [top, logits], out=outputs[1])


# --- Gated DeltaNet (docs/ops.md, "Gated DeltaNet"): Conv and a Scan over the tokens in float32 -----

def _silu(e, t):
    return e.op("Div", [t, e.op("Add", [e.f32("one", 1.0), e.op("Exp", [e.op("Neg", [t])])])])


def expand_causal_conv1d(e, inputs: list, outputs: list, a: dict, key: str) -> None:
    """u = cat(conv_state, x^T) along the tokens, a depthwise Conv of it in float32, SiLU; the
    new state is u's last kernel_size - 1 columns."""
    x, weight, state = inputs[0], inputs[1], inputs[2]
    c, kernel = int(a["channels"]), int(a["kernel_size"])
    u = e.op("Concat", [state, e.op("Transpose", [x], {"perm": [0, 2, 1]})], {"axis": 2})  # [B, C, K - 1 + S]
    conv = e.op("Conv", [_f32(e, u), _f32(e, weight)], {"group": c, "kernel_shape": [kernel]})
    y = e.op("Transpose", [_silu(e, conv)], {"perm": [0, 2, 1]})
    e.op("CastLike", [y, x], out=outputs[0])
    e.op("Slice", [u, e.i64("start", [1 - kernel]), e.i64("end", [np.iinfo(np.int64).max]), e.i64("axis", [2])],
         out=outputs[1])


def _heads(e, x32, start: int, heads: int, dim: int, rep: int):
    """x32[..., start : start + heads * dim] as [B, S, heads * rep, dim], each head repeated rep times."""
    part = e.op("Slice", [x32, e.i64("start", [start]), e.i64("end", [start + heads * dim]), e.i64("axis", [2])])
    t = e.op("Reshape", [part, e.i64("shape", [0, 0, heads, 1, dim])])
    if rep > 1:
        t = e.op("Expand", [t, e.i64("rep", [1, 1, 1, rep, 1])])
    return e.op("Reshape", [t, e.i64("shape", [0, 0, heads * rep, dim])])


def _l2_normalize(e, t):
    ss = e.op("ReduceSum", [e.op("Mul", [t, t]), e.i64("axes", [-1])], {"keepdims": 1})
    r = e.op("Div", [e.f32("one", 1.0), e.op("Sqrt", [e.op("Add", [ss, e.f32("eps", GDN_L2NORM_EPS)])])])
    return e.op("Mul", [t, r])


def _softplus(e, u):
    """Softplus(u), u itself above the contract's threshold."""
    above = e.op("Greater", [u, e.f32("threshold", GDN_SOFTPLUS_THRESHOLD)])
    return e.op("Where", [above, u, e.op("Softplus", [u])])


def _delta_rule_body(prefix: str) -> gs.Graph:
    """One token of the rule: (state, q, k, v, gamma, beta) -> (state, o)."""
    body = gs.Graph(name=f"{prefix}_token")
    b = Emitter(body, f"{prefix}/token")
    f32 = np.float32
    s_in, q, k, v, g, beta = (gs.Variable(b.name(n), dtype=f32) for n in ("state", "q", "k", "v", "gamma", "beta"))
    s1 = b.op("Mul", [s_in, b.op("Unsqueeze", [g, b.i64("axes", [2, 3])])])
    k4 = b.op("Unsqueeze", [k, b.i64("axes", [3])])
    kv = b.op("ReduceSum", [b.op("Mul", [s1, k4]), b.i64("axes", [2])], {"keepdims": 0})
    delta = b.op("Mul", [b.op("Sub", [v, kv]), b.op("Unsqueeze", [beta, b.i64("axes", [2])])])
    s_out = b.op("Add", [s1, b.op("Mul", [k4, b.op("Unsqueeze", [delta, b.i64("axes", [2])])])])
    q4 = b.op("Unsqueeze", [q, b.i64("axes", [3])])
    o = b.op("ReduceSum", [b.op("Mul", [s_out, q4]), b.i64("axes", [2])], {"keepdims": 0})
    s_out.dtype, o.dtype = f32, f32
    body.inputs, body.outputs = [s_in, q, k, v, g, beta], [s_out, o]
    return body


def expand_gated_delta_rule(e, inputs: list, outputs: list, a: dict, key: str) -> None:
    """The l2 norms, beta and the decay in float32, then a Scan stepping the recurrent form over
    the tokens (axis 1), the state its carried value."""
    x, ba, a_log, dt_bias, state = inputs[:5]
    hk, hv, dk, dv = (int(a[n]) for n in ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"))
    rep = hv // hk
    x32 = _f32(e, x)
    q = e.op("Div", [_l2_normalize(e, _heads(e, x32, 0, hk, dk, rep)), e.f32("sqrt_dk", np.sqrt(np.float64(dk)))])
    k = _l2_normalize(e, _heads(e, x32, hk * dk, hk, dk, rep))
    v = _heads(e, x32, 2 * hk * dk, hv, dv, 1)
    ba32 = _f32(e, ba)
    b_in = e.op("Slice", [ba32, e.i64("start", [0]), e.i64("end", [hv]), e.i64("axis", [2])])
    a_in = e.op("Slice", [ba32, e.i64("start", [hv]), e.i64("end", [2 * hv]), e.i64("axis", [2])])
    beta = e.op("Sigmoid", [b_in])
    decay = e.op("Neg", [e.op("Mul", [e.op("Exp", [_f32(e, a_log)]),
                                      _softplus(e, e.op("Add", [a_in, _f32(e, dt_bias)]))])])
    gamma = e.op("Exp", [decay])
    out = gs.Variable(e.name("scan_y"))
    e.ops("Scan", [state, q, k, v, gamma, beta],
          {"body": _delta_rule_body(e.prefix), "num_scan_inputs": 5, "scan_input_axes": [1] * 5,
           "scan_output_axes": [1]}, [outputs[1], out])
    e.op("CastLike", [out, x], out=outputs[0])


EXPANSIONS = {"Attention": expand_attention, "RMSNorm": expand_rms_norm, "FloatProj": expand_float_proj,
              "Router": expand_router, "CausalConv1d": expand_causal_conv1d,
              "GatedDeltaRule": expand_gated_delta_rule}
