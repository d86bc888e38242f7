"""The qdq lowering of the projections, one function per weight format: standard ONNX that
TensorRT builds with no plugin, DequantizeLinear of the stored weights + MatMul, with the
activation formats emulated as the contract defines them (``lower_projection``; lowering.py runs
it over a graph).

How each weight format is stored (weights are transposed to [K, N] so MatMul needs no Transpose):
- W4A16, symmetric: INT4 ``code - 8`` with the bfloat16 group scales widened to float32 (exact),
  blocked DequantizeLinear (axis 0, block_size = group_size), then ``bf16(w)``: the product
  ``(code - z) * s`` is exact in float32, so this is the contract's one rounding. TensorRT has no
  UINT4 weights and no zero points in DequantizeLinear, so with zero points the weight stays INT4
  ``code - 8`` and a float32 per-group offset ``(8 - z) * s`` is added before the rounding (exact:
  ``(code - 8) * s + (8 - z) * s = (code - z) * s``). TensorRT(-RTX) keeps such INT4 constants
  INT4 in the engine (measured: half a byte a weight). A partial last group is padded with zero
  codes to a whole group and the activation with zero columns (Pad), so every block is whole.
- W8A8: FLOAT8E4M3FN codes with per-channel scales (axis 1) or, for 128x128 blocks, scales
  repeated along N and blocked along K (axis 0, block_size = 128).
- W4A4: neither ONNX Runtime nor TensorRT before SM 10.0 runs FLOAT4E2M1, so the e2m1 values are
  stored as FLOAT8E4M3FN (exactly: every e2m1 value is an e4m3 value) with the decoded per-16
  scales, blocked along K (block_size = 16); the global scale is a Mul. One byte a weight instead
  of half a byte.

How activations are computed:
- every format starts with ``x = bf16(X)`` (Cast to bfloat16 and back);
- ``bf16``: ``MatMul(x, bf16(w))`` in float32. Both operands are exact in bfloat16, so the products
  are exact in float32 and even TF32 tensor cores lose nothing;
- ``fp8``: per-row (or per row and 128-block) dynamic scales, ``x / sx`` quantized by a
  QuantizeLinear/DequantizeLinear pair with a constant unit scale (TensorRT's Q/DQ take only
  build-time scales, so the dynamic scale is a Div before and a Mul after); a static scale
  (``tensor``) is the same with ``sx`` a constant;
- ``nvfp4``: the contract's two-level scaling in plain ops: the e4m3 block scale through a unit
  Q/DQ pair, the e2m1 rounding as Round on the three spacings of the e2m1 grid. The GEMM runs on
  exact float32 operands: an emulation, not FP4 tensor cores.

Invariants: a format's function reads only initializers (a computed weight is refused, naming the
node and the input) and returns the float32 product and the index of the node's next input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs

from .. import contract
from .emitter import Emitter, np_dtype
from .nodes import LoweringError

_E4M3_MAX = contract.E4M3_MAX
_NVFP4_GLOBAL = contract.NVFP4_GLOBAL_DIVISOR
_FP8_BLOCK = contract.FP8_BLOCK
_NVFP4_BLOCK = contract.NVFP4_BLOCK
_E2M1 = np.array(contract.E2M1_VALUES, dtype=np.float32)


def _unpack(packed: np.ndarray) -> np.ndarray:
    """[..., K/2] int8 -> [..., K] uint8 nibbles, the even element in the low nibble."""
    p = packed.view(np.uint8)
    return np.stack((p & 0xF, p >> 4), axis=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


def _e4m3_values(bits: np.ndarray) -> np.ndarray:
    return bits.view(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def _constant(node: gs.Node, index: int, what: str, key: str) -> np.ndarray:
    t = node.inputs[index] if index < len(node.inputs) else None
    if not isinstance(t, gs.Constant):
        found = "missing" if t is None else f"a computed tensor {t.name!r}"
        raise LoweringError(
            f"node {key} ({node.op}): input {index} ({what}) must be an initializer for the qdq "
            f"lowering, found {found}"
        )
    return np.asarray(t.values)


def _expect_shape(arr: np.ndarray, shape: tuple, what: str, key: str, node: gs.Node) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise LoweringError(
            f"node {key} ({node.op}): {what}: expected shape {list(shape)}, found {list(arr.shape)}"
        )


def _lower_w4a16(e: Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
    n, k, g = int(a["n"]), int(a["k"]), int(a["group_size"])
    if g <= 0 or k % 2:
        raise LoweringError(f"node {key} (W4A16Proj): group_size {g} and an even k needed, found k={k}")
    groups = -(-k // g)
    weight = _constant(node, 1, "weight", key)
    scale = _constant(node, 2, "weight_scale", key)
    if scale.dtype != np.dtype(ml_dtypes.bfloat16):
        raise LoweringError(f"node {key} (W4A16Proj): weight_scale: expected bfloat16 (op version 2), "
                            f"found {scale.dtype}")
    scale = scale.astype(np.float32)  # exact
    _expect_shape(weight, (n, k // 2), "weight", key, node)
    _expect_shape(scale, (n, groups), "weight_scale", key, node)
    idx = 3
    q = (_unpack(weight).astype(np.int8) - 8).T  # [K, N] int4 codes - 8
    pad = groups * g - k
    if pad:  # a partial last group: zero codes and zero activations make it whole
        q = np.concatenate((q, np.zeros((pad, n), dtype=q.dtype)), axis=0)
        x = e.op("Pad", [x, e.i64("pads", [0, 0, 0, pad])])
    w = e.dequantize(q.astype(ml_dtypes.int4), scale.T.copy(), axis=0, block=g)
    if a["has_zero_point"]:
        # (code - z) * s = (code - 8) * s + (8 - z) * s: INT4 codes and a per-group offset, both
        # terms and their sum exact in float32 (|code - z| <= 15 times a bfloat16 scale).
        zp = _constant(node, idx, "zero_point", key).astype(np.float32)
        _expect_shape(zp, (n, groups), "zero_point", key, node)
        idx += 1
        offset = ((8.0 - zp) * scale).T.reshape(groups, 1, n)
        w = e.op("Reshape", [w, e.i64("shape", [groups, g, n])])
        w = e.op("Reshape", [e.op("Add", [w, e.f32("w_offset", offset)]), e.i64("shape", [groups * g, n])])
    return e.op("MatMul", [x, e.bf16_round(w)]), idx


def _lower_w8a8(e: Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
    n, k = int(a["n"]), int(a["k"])
    weight = _constant(node, 1, "weight", key)
    scale = _constant(node, 2, "weight_scale", key).astype(np.float32)
    _expect_shape(weight, (n, k), "weight", key, node)
    codes = weight.view(np.uint8).T.copy().view(ml_dtypes.float8_e4m3fn)
    granularity = a["weight_scale_granularity"]
    if granularity == "channel":
        _expect_shape(scale, (n,), "weight_scale", key, node)
        w = e.dequantize(codes, scale, axis=1)
    elif granularity == "block128":
        nb, kb = contract.ceil_div(n, _FP8_BLOCK), contract.ceil_div(k, _FP8_BLOCK)
        _expect_shape(scale, (nb, kb), "weight_scale", key, node)
        per_column = np.repeat(scale.T, _FP8_BLOCK, axis=1)[:, :n].copy()  # [kb, N]
        w = e.dequantize(codes, per_column, axis=0, block=_FP8_BLOCK)
    else:
        raise LoweringError(
            f"node {key} (W8A8Proj): weight_scale_granularity {granularity!r}: expected channel "
            f"or block128"
        )
    act = a["activation_scale_granularity"]
    static = act == contract.STATIC_ACTIVATION_SCALE  # input_scale follows weight_scale
    if fmt == "bf16":
        return e.op("MatMul", [x, e.bf16_round(w)]), 4 if static else 3
    if static:
        # sx is a build-time constant: x / sx saturates to +-448 in the unit Q/DQ (docs/ops.md).
        sx_value = _constant(node, 3, "input_scale", key).astype(np.float32).reshape(-1)
        _expect_shape(sx_value, (1,), "input_scale", key, node)
        sx = e.f32("input_scale", sx_value.reshape(1, 1))
        xq = e.fp8_unit_qdq(e.op("Div", [x, sx]))
        return e.op("Mul", [e.op("MatMul", [xq, w]), sx]), 4
    if act == "row":
        sx = e.row_amax_scale(x, 1, _E4M3_MAX)  # [M, 1]
        xq = e.fp8_unit_qdq(e.op("Div", [x, sx]))
        return e.op("Mul", [e.op("MatMul", [xq, w]), sx]), 3
    if act != "row_block128":
        raise LoweringError(
            f"node {key} (W8A8Proj): activation_scale_granularity {act!r}: expected row, "
            f"row_block128 or tensor"
        )
    kb = contract.ceil_div(k, _FP8_BLOCK)
    padded = x
    if kb * _FP8_BLOCK != k:
        padded = e.op("Pad", [x, e.i64("pads", [0, 0, 0, kb * _FP8_BLOCK - k])])
    blocks = e.op("Reshape", [padded, e.i64("shape", [-1, kb, _FP8_BLOCK])])
    sx = e.row_amax_scale(blocks, 2, _E4M3_MAX)  # [M, kb, 1]
    xq = e.op("Mul", [e.fp8_unit_qdq(e.op("Div", [blocks, sx])), sx])
    xq = e.op("Reshape", [xq, e.i64("shape", [-1, kb * _FP8_BLOCK])])
    if kb * _FP8_BLOCK != k:
        xq = e.op("Slice", [xq, e.i64("starts", [0]), e.i64("ends", [k]), e.i64("axes", [1])])
    return e.op("MatMul", [xq, w]), 3


def _lower_w4a4(e: Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
    n, k = int(a["n"]), int(a["k"])
    if k % _NVFP4_BLOCK:
        raise LoweringError(f"node {key} (W4A4Proj): k={k} must be a multiple of {_NVFP4_BLOCK}")
    weight = _constant(node, 1, "weight", key)
    scale = _constant(node, 2, "weight_scale", key)
    gw = _constant(node, 3, "weight_global_scale", key).astype(np.float32).reshape(-1)
    _expect_shape(weight, (n, k // 2), "weight", key, node)
    _expect_shape(scale, (n, k // _NVFP4_BLOCK), "weight_scale", key, node)
    _expect_shape(gw, (1,), "weight_global_scale", key, node)
    c = _unpack(weight)
    values = np.where(c & 8, -_E2M1[c & 7], _E2M1[c & 7])
    codes = values.T.astype(ml_dtypes.float8_e4m3fn)  # exact
    factors = e.dequantize(codes, _e4m3_values(scale).T.copy(), axis=0, block=_NVFP4_BLOCK)
    idx = 4
    input_scale = None
    if a["has_input_scale"]:
        input_scale = _constant(node, idx, "input_scale", key).astype(np.float32).reshape(-1)
        idx += 1
    if fmt == "bf16":
        w = e.bf16_round(e.op("Mul", [factors, e.f32("global_scale", gw)]))
        return e.op("MatMul", [x, w]), idx
    if input_scale is not None:
        ga = e.f32("input_scale", input_scale.reshape(1, 1))
    else:
        ga = e.row_amax_scale(x, 1, _NVFP4_GLOBAL)  # [M, 1]
    ga3 = e.op("Unsqueeze", [ga, e.i64("axes", [2])])  # [M or 1, 1, 1]
    blocks = e.op("Reshape", [x, e.i64("shape", [-1, k // _NVFP4_BLOCK, _NVFP4_BLOCK])])
    bmax = e.op("ReduceMax", [e.op("Abs", [blocks]), e.i64("axes", [2])], {"keepdims": 1})
    six_ga = e.op("Mul", [ga3, e.f32("six", 6.0)])  # rounded first, as the contract says
    sa = e.fp8_unit_qdq(e.op("Div", [bmax, six_ga]))
    eff = e.op("Mul", [sa, ga3])
    is_zero = e.op("Equal", [eff, e.f32("zero", 0.0)])
    safe = e.op("Where", [is_zero, e.f32("one", 1.0), eff])
    q = e.e2m1_round(e.op("Div", [blocks, safe]))
    q = e.op("Where", [is_zero, e.f32("zero", 0.0), q])
    act = e.op("Reshape", [e.op("Mul", [q, sa]), e.i64("shape", [-1, k])])
    acc = e.op("MatMul", [act, factors])
    return e.op("Mul", [acc, e.op("Mul", [ga, e.f32("global_scale", gw)])]), idx


_LOWER = {"W4A16Proj": _lower_w4a16, "W8A8Proj": _lower_w8a8, "W4A4Proj": _lower_w4a4}


def lower_projection(graph: gs.Graph, node: gs.Node, a: dict, key: str, fmt: str, store=None) -> None:
    """Replace a projection node by its format's standard-ONNX product (``_LOWER``), its bias and
    the cast to X's dtype, writing the node's output."""
    x_in, y = node.inputs[0], node.outputs[0]
    dtype = np_dtype(x_in.dtype) or np_dtype(y.dtype)
    e = Emitter(graph, f"{key}", store)
    node.outputs.clear()  # detach y before the last emitted node writes it
    x = e.bf16_round(x_in)
    acc, next_input = _LOWER[node.op](e, node, a, key, fmt, x)
    if a["has_bias"]:
        bias = _constant(node, next_input, "bias", key).astype(np.float32)
        _expect_shape(bias, (int(a["n"]),), "bias", key, node)
        acc = e.op("Add", [acc, e.f32("bias", bias)])
    # The output has X's dtype (docs/ops.md): CastLike needs no dtype known at lowering time.
    e.op("CastLike", [acc, x_in], out=y)
    if dtype is not None:
        y.dtype = dtype
    if store is not None:
        store.release(node.inputs)
    node.inputs.clear()
