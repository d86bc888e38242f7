"""The ``metrale`` ops: one ``OpSpec`` per op type in ``OPS`` (the projections, their grouped-expert
forms, the norms, the float projection, the router, attention and Gated DeltaNet), with the numeric
facts of each op's reduction order beside its spec, and the kernels' C enums (``C_ENUMS``).

Invariants:
- one ``OpSpec`` per op type; its ``attributes`` are in the contract's order, which is the plugins'
  field order; ``inputs`` are positional, after the first input (``x_name``, "x" unless named,
  whose dtype is the op's activation dtype T); an optional input is present exactly when its
  ``gate`` attribute (``has_<input>``) is 1, and ``gate`` attributes are never torch op arguments
  (they follow from which inputs are present);
- ``outputs`` are positional too (one ``y`` of x's dtype unless the op says otherwise); an
  optional output is present exactly when its ``gate`` is 1; the torch op returns every output
  (an absent one as the input named by its ``absent``), the ONNX node only the present ones;
- ``category`` says what an op is: "projection" (a quantized projection with an activation
  format, which the engine policy chooses), or one of ``NON_PROJECTION_CATEGORIES``;
- an attribute's ``values`` are in the order of the C enum the kernels take (``codes``);
- each op has its own ``version`` (the ONNX schema's since_version and the TensorRT plugin version);
  the domain's opset version is the largest of them, so bumping one op bumps the domain and leaves
  the others' schemas as they are.
Adding an op is adding an ``OpSpec`` to ``OPS`` (and its reference, kernels and plugin).
"""

from __future__ import annotations

import dataclasses
import struct

from .numerics import ACTIVATION_FORMATS, FAMILIES, GROUP_SIZES, X_DTYPES
from .schema import Attribute, Input, OpSpec, Output

def _common_head() -> tuple[Attribute, ...]:
    return (Attribute("n", "int", doc="N, the output columns"), Attribute("k", "int", doc="K, the input columns"))


def _act(formats: tuple[str, ...], default: str) -> Attribute:
    return Attribute("activation_format", "string", formats, default,
                     "the activation format the op runs (docs/ops.md, Activation formats)")


def _common_tail() -> tuple[Attribute, ...]:
    return (Attribute("has_bias", "int", (0, 1), 0),
            Attribute("family", "string", FAMILIES, "", "the projection family (per-family policies)"),
            Attribute("name", "string", None, "", "the checkpoint name of the projection"))


_BIAS = Input("bias", "float32", ("n",), "has_bias")
_X_DOC = "x: [M, K], float32, float16 or bfloat16; y: [M, N], the dtype of x"

# W4A16Proj version 2: bfloat16 group scales (rounded once from whatever precision they come in,
# ops/w4a16.store_scale) and a partial last group when group_size does not divide k (k even).
# Version 1 had float32 scales and group_size dividing k; its graphs are refused (``version_check``).
W4A16_SCALE_DTYPE = "bfloat16"
W4A16 = OpSpec(
    "W4A16Proj", "w4a16", 2, "int4",
    inputs=(Input("weight", "int8", ("n", "k/2"), doc="two unsigned 4-bit codes a byte, even k low"),
            Input("weight_scale", W4A16_SCALE_DTYPE, ("n", "ceil(k/group_size)"),
                  doc="bf16, one per row and group of group_size consecutive k (the last may be shorter)"),
            Input("zero_point", "int8", ("n", "ceil(k/group_size)"), "has_zero_point", "0..15; absent: 8"),
            _BIAS),
    attributes=(*_common_head(),
                Attribute("group_size", "int", GROUP_SIZES, doc="k even; a partial last group when it does not divide k"),
                Attribute("has_zero_point", "int", (0, 1), 0),
                _act(("bf16",), "bf16"),
                *_common_tail()),
    activation_formats=("bf16",), default_activation="bf16", doc=_X_DOC)

# W8A8Proj version 3: the fp8 activation format multiplies on the FP8 tensor core (docs/ops.md,
# "fp8 activation format"): e4m3 x e4m3 products summed within each 128-k block by the tensor
# core's FP8 accumulator (not float32: W8A8_FP8_ARITHMETIC, bounded by ops/tolerances.OP_FP32["fp8"]),
# promoted to float32 once per block, per-row x per-channel scales in the epilogue. Its bits differ
# from version 2's (exact f16 products in float32), so version 1 and 2 graphs are refused (``version_check``,
# OLDER_VERSIONS). Version 2 added the static per-tensor activation scale (activation_scale_granularity
# "tensor", its input_scale from calibration); version 1 is the dynamic scales alone.
W8A8_VERSION = 3
W8A8_FP8_ARITHMETIC = ("FP8 e4m3 products summed in the FP8 tensor core's accumulator within each 128-k block, "
                       "promoted to float32 every 128 k, per-row x per-channel scales in the epilogue "
                       "(block scales: each block scaled at its promotion)")
W8A8 = OpSpec(
    "W8A8Proj", "w8a8", W8A8_VERSION, "FP8",
    inputs=(Input("weight", "int8", ("n", "k"), doc="FP8 e4m3fn bit patterns", encoding="e4m3fn"),
            Input("weight_scale", "float32", ("n",), doc="[n] (channel) or [ceil(n/128), ceil(k/128)] (block128)"),
            Input("input_scale", "float32", ("1",), "activation_scale_granularity",
                  "the static activation scale sx (calibrated), present for activation_scale_granularity=tensor",
                  gate_value="tensor"),
            _BIAS),
    attributes=(*_common_head(),
                Attribute("weight_scale_granularity", "string", ("channel", "block128"), "channel"),
                _act(("bf16", "fp8"), "fp8"),
                Attribute("activation_scale_granularity", "string", ("row", "row_block128", "tensor"), "row",
                          "used when activation_format=fp8; tensor: the static scale input_scale (version 2)"),
                *_common_tail()),
    activation_formats=("bf16", "fp8"), default_activation="fp8", doc=f"{_X_DOC}; fp8 activations: {W8A8_FP8_ARITHMETIC}")

W4A4 = OpSpec(
    "W4A4Proj", "w4a4", 1, "NVFP4",
    inputs=(Input("weight", "int8", ("n", "k/2"), doc="two e2m1 codes a byte, even k low"),
            Input("weight_scale", "int8", ("n", "k/16"), doc="e4m3fn bit patterns, one per 16 k",
                  encoding="e4m3fn"),
            Input("weight_global_scale", "float32", ("1",)),
            Input("input_scale", "float32", ("1",), "has_input_scale", "static activation global scale"),
            _BIAS),
    attributes=(*_common_head(),
                _act(("bf16", "nvfp4"), "nvfp4"),
                Attribute("has_input_scale", "int", (0, 1), 0),
                *_common_tail()),
    activation_formats=("bf16", "nvfp4"), default_activation="nvfp4", doc=_X_DOC)



# How a MoE's experts export (--moe-experts): as its grouped-expert op (below), or one dense op per
# expert run on every row (what a standard-ONNX lowering can express).
MOE_LAYOUTS = ("grouped", "dense")


def grouped(dense: OpSpec, version: int | None = None) -> OpSpec:
    """The grouped-expert op of ``dense`` (docs/ops.md, Grouped-expert ops): x, topk_ids, the dense
    op's inputs stacked with a leading expert axis, topk_weights (combine=1 only, last: ONNX wants
    optional inputs after the required ones); the dense attributes with the routing ones after k.
    Each expert computes the dense op; the torch op takes the routing inputs first. ``version``: the
    grouped op's own version where it differs from the dense op's (None: the dense op's)."""
    stacked = tuple(dataclasses.replace(i, shape=("num_experts",) + (() if i.shape == ("1",) else i.shape))
                    for i in dense.inputs)
    inputs = (Input("topk_ids", "int32", ("m", "top_k"), doc="distinct expert ids in [0, num_experts) a row"),
              *stacked,
              Input("topk_weights", "x", ("m", "top_k"), "combine", "the routing weights of combine=1"))
    routing = (Attribute("num_experts", "int", doc="E, the stacked experts"),
               Attribute("top_k", "int", doc="experts a row"),
               Attribute("combine", "int", (0, 1), doc="1: sum the slots' outputs weighted by topk_weights"))
    return dataclasses.replace(
        dense, op_type=dense.op_type.replace("Proj", "MoEProj"), version=dense.version if version is None else version,
        inputs=inputs,
        attributes=dense.attributes[:2] + routing + dense.attributes[2:],
        doc="x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]",
        torch_op=f"{dense.kind}_moe_proj", torch_input_order=("topk_ids", "topk_weights", *(i.name for i in dense.inputs)),
        grouped_of=dense.op_type)


# W8A8MoEProj stays at version 2: its grouped kernel (plugins/moeProj/moeW8a8Kernel.cu) has no FP8
# wgmma tier yet, so each expert computes W8A8Proj version 2's arithmetic (exact f16 products in
# float32; docs/ops.md, Grouped-expert ops). Moving it to the FP8 wgmma is its own version bump.
W8A8_MOE_VERSION = 2
OPS: dict[str, OpSpec] = {op.op_type: op for op in (W4A16, W8A8, W4A4)}
OPS.update({g.op_type: g for g in (grouped(W4A16), grouped(W8A8, W8A8_MOE_VERSION), grouped(W4A4))})


# --- the non-projection ops (issue 19: every reduction of the graph a metrale op) ------------------
# Norms, the float projection and the router; the attention block follows its own heading. Each
# reduces every row in a fixed order that does not depend on the number of rows (docs/ops.md).
NON_PROJECTION_CATEGORIES = ("norm", "float projection", "router", "attention", "recurrence")


def _name_tail() -> tuple[Attribute, ...]:
    return (Attribute("family", "string", FAMILIES, "", "the family of the layer it sits in"),
            Attribute("name", "string", None, "", "the checkpoint name of the module (its weight's prefix)"))


# RMSNorm: y = norm(s) scaled by the weight, s = x (+ residual); optionally gated by silu(gate).
RMSNORM_BLOCK = 256  # threads a row (one CTA a row): the fixed reduction width (docs/ops.md)
RMSNORM = OpSpec(
    "RMSNorm", "rms_norm", 1, category="norm", torch_op="rms_norm",
    inputs=(Input("weight", "x", ("k",), doc="the norm weight, x's dtype"),
            Input("residual", "x", ("...", "k"), "has_residual", "added to x first (the fused residual add)"),
            Input("gate", "x", ("...", "k"), "has_gate", "z of the gated norm: the result times silu(z)")),
    attributes=(Attribute("k", "int", doc="K, the normalized (last) dimension"),
                Attribute("epsilon", "float", doc="added to the mean square"),
                Attribute("weight_offset", "int", (0, 1), 0, "1: scale by (1 + weight) in float32 (Qwen3-Next)"),
                Attribute("has_residual", "int", (0, 1), 0),
                Attribute("has_gate", "int", (0, 1), 0),
                *_name_tail()),
    outputs=(Output("y", "x", ("...", "k")),
             Output("residual_out", "x", ("...", "k"), "has_residual", "x",
                    "s = x + residual in x's dtype, the next residual")),
    doc="x: [..., K] (rows: the leading dimensions, e.g. [B, S, H] or the q/k norm's [B, S, heads, D]); "
        "y: x's shape and dtype")

# FloatProj: the float weights that stay float (lm_head, the router gate, GDN's small
# projections), W4A16's bf16 arithmetic without the dequantization.
FLOAT_PROJ = OpSpec(
    "FloatProj", "float", 1, "bf16", category="float projection", torch_op="float_proj",
    inputs=(Input("weight", "bfloat16", ("n", "k"), doc="bf16, rounded once from the checkpoint"), _BIAS),
    attributes=(*_common_head(), Attribute("has_bias", "int", (0, 1), 0), *_name_tail()),
    doc=_X_DOC)

# Router: softmax over the experts and top-k a row (ties: the lower expert id), optionally
# renormalized; x are the router logits (a FloatProj's output).
ROUTER = OpSpec(
    "Router", "router", 1, category="router", torch_op="router", x_name="logits",
    attributes=(Attribute("num_experts", "int", doc="E, the logits' columns"),
                Attribute("top_k", "int", doc="experts a row"),
                Attribute("normalize", "int", (0, 1), 0, "1: divide the top-k probabilities by their sum"),
                *_name_tail()),
    outputs=(Output("topk_ids", "int32", ("m", "top_k"), doc="ascending probability order, ties lower id first"),
             Output("topk_weights", "x", ("m", "top_k"))),
    doc="logits: [M, E]; topk_ids: [M, top_k] int32; topk_weights: [M, top_k], the dtype of logits")

OPS.update({o.op_type: o for o in (RMSNORM, FLOAT_PROJ, ROUTER)})
# --- end of the non-projection ops ------------------------------------------------------------------


# The kernels' C enums (include/metrale/contract.h, generated): name, label prefix, the values in code order.
C_ENUMS = (("MetraleDType", "", X_DTYPES), ("MetraleActFormat", "ACT_", ACTIVATION_FORMATS),
           ("MetraleWeightScale", "WSCALE_", W8A8.attribute("weight_scale_granularity").values),
           ("MetraleActScale", "ASCALE_", W8A8.attribute("activation_scale_granularity").values))


# ---- Attention (docs/ops.md, "Attention"): the numeric facts of its reduction order ------------
# Kept as one block apart from the projection specs. The kernel (plugins/attention/attentionKernel.cuh)
# carries the same constants; tests/ops/test_attention.py fails when they drift.
ATTENTION_BLOCK_KEYS = 64      # keys per online-softmax block, at absolute positions 0, 64, 128, ...
ATTENTION_CHUNK_BLOCKS = 4     # blocks per chunk: the chunks' (m, l, o) fold in ascending order
ATTENTION_HEAD_DIMS = (64, 128, 256)
ATTENTION_DTYPES = ("float16", "bfloat16")
LOG2E = 1.4426950408889634     # log2(e) as a float64


# The op: q [B, Hq, S, D] (x_name "q"), key / value [B, Hkv, T, D] (the cache with this step's keys
# appended), y [B, S, Hq, D]; shapes "x.<i>" are q's dimension i.
ATTENTION = OpSpec(
    "Attention", "attention", 1, category="attention", torch_op="attention", x_name="q",
    inputs=(Input("key", "x", ("x.0", "kv_heads", "total", "head_dim"),
                  doc="the keys of the past and of this step, [B, kv_heads, total, head_dim], total >= S"),
            Input("value", "x", ("x.0", "kv_heads", "total", "head_dim"), doc="the values, as key")),
    attributes=(Attribute("q_heads", "int", doc="Hq, a multiple of kv_heads"),
                Attribute("kv_heads", "int", doc="Hkv"),
                Attribute("head_dim", "int", doc="D (the CUDA kernel runs ATTENTION_HEAD_DIMS; the references any)"),
                Attribute("scale", "float", doc="the score scale (Qwen3: head_dim ** -0.5)"),
                *_name_tail()),
    outputs=(Output("y", "x", ("x.0", "x.2", "q_heads", "head_dim")),),
    doc="q: [B, Hq, S, D]; key, value: [B, Hkv, T, D]; y: [B, S, Hq, D], the dtype of q; causal, query i "
        "at position T - S + i")
OPS[ATTENTION.op_type] = ATTENTION


# ---- Gated DeltaNet (docs/ops.md, "Gated DeltaNet"): the causal conv1d and the gated delta rule ---
# Both run each sequence's tokens in order, one token at a time (the recurrent form), so a token's
# result depends only on its own sequence's earlier tokens and the state: not on the batch, and not
# on how its sequence was split into prefill chunks (the state between two calls holds exactly what
# the next token reads). The kernels (plugins/gatedDeltaNet/gdnKernel.cuh) carry the same constants;
# tests/ops/test_gdn.py fails when they drift.
GDN_L2NORM_EPS = 1e-6          # added to the sum of squares of q and k before 1/sqrt
GDN_SOFTPLUS_THRESHOLD = 20.0  # softplus(u) = u above it (torch's softplus threshold)
GDN_HEAD_K_DIMS = (64, 128)    # head_k_dim the CUDA kernel runs (the state column in registers)
GDN_HEAD_V_BLOCK = 32          # head_v_dim a multiple of it on CUDA (one warp a block of columns)
# The rule's sums over dk (S^T k and S^T q) run in parts of GDN_STATE_PART consecutive i, each
# ascending from +0, the parts' sums then added in ascending order (the first as it is): a lane a part.
GDN_STATE_PART = 64
GDN_CONV_KERNELS = (2, 3, 4, 5, 6, 7, 8)  # kernel_size the CUDA conv runs

CAUSAL_CONV1D = OpSpec(
    "CausalConv1d", "causal_conv1d", 1, category="recurrence", torch_op="causal_conv1d",
    inputs=(Input("weight", "x", ("channels", "1", "kernel_size"), doc="the depthwise conv weight, x's dtype"),
            Input("conv_state", "x", ("x.0", "channels", "kernel_size-1"),
                  doc="the last kernel_size - 1 inputs before x (zeros: an empty prefix)")),
    attributes=(Attribute("channels", "int", doc="C, the channels (x's last dimension)"),
                Attribute("kernel_size", "int", doc="K, the taps a channel"),
                *_name_tail()),
    outputs=(Output("y", "x", ("x.0", "x.1", "channels"), doc="silu(conv), x's dtype"),
             Output("conv_state_out", "x", ("x.0", "channels", "kernel_size-1"),
                    doc="the last kernel_size - 1 inputs of cat(conv_state, x): the next call's conv_state")),
    doc="x: [B, S, C]; conv_state: [B, C, K - 1]; y: [B, S, C], x's dtype; y[t] = silu(sum_j w[j] * u[t + j]) "
        "over u = cat(conv_state, x) along the tokens")

GATED_DELTA_RULE = OpSpec(
    "GatedDeltaRule", "gated_delta_rule", 1, category="recurrence", torch_op="gated_delta_rule",
    inputs=(Input("ba", "x", ("x.0", "x.1", "2*num_v_heads"), doc="[b | a]: beta = sigmoid(b), a the decay's input"),
            Input("A_log", "x", ("num_v_heads",), doc="the decay rate's log, a value head"),
            Input("dt_bias", "x", ("num_v_heads",), doc="added to a before softplus"),
            Input("state", "float32", ("x.0", "num_v_heads", "head_k_dim", "head_v_dim"),
                  doc="the recurrent state (zeros: an empty prefix)")),
    attributes=(Attribute("num_k_heads", "int", doc="Hk, the query/key heads"),
                Attribute("num_v_heads", "int", doc="Hv, a multiple of num_k_heads (value head h reads key head h // (Hv / Hk))"),
                Attribute("head_k_dim", "int", doc="dk (the CUDA kernel runs GDN_HEAD_K_DIMS)"),
                Attribute("head_v_dim", "int", doc="dv (a multiple of GDN_HEAD_V_BLOCK on CUDA)"),
                *_name_tail()),
    outputs=(Output("y", "x", ("x.0", "x.1", "num_v_heads", "head_v_dim"), doc="the rule's output, x's dtype"),
             Output("state_out", "float32", ("x.0", "num_v_heads", "head_k_dim", "head_v_dim"),
                    doc="the state after the last token")),
    doc="x: [B, S, 2 Hk dk + Hv dv] = [q | k | v] (the conv's output); ba: [B, S, 2 Hv]; state: [B, Hv, dk, dv] "
        "float32; y: [B, S, Hv, dv], x's dtype; state_out like state")
OPS.update({o.op_type: o for o in (CAUSAL_CONV1D, GATED_DELTA_RULE)})


def attention_scale_log2(scale: float) -> float:
    """The score multiplier of the Attention op: float32(float32(scale) * log2 e), the product in
    float64 and rounded once to float32 (scores are ``x = s * scale_log2`` and the softmax runs in
    base 2)."""
    s32 = struct.unpack("f", struct.pack("f", scale))[0]
    return struct.unpack("f", struct.pack("f", s32 * LOG2E))[0]
