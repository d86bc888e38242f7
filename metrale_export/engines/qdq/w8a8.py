"""The qdq lowering of W8A8Proj (FP8 weights).

FLOAT8E4M3FN codes with per-channel scales (axis 1) or, for 128x128 blocks, scales repeated along
N and blocked along K (axis 0, block_size = 128); the activations as the package docstring says
(dynamic per row or per row and 128-block, or a static per-tensor scale).

Invariants: reads only initializers (``common.constant``); returns the float32 product and the
index of the node's next input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs

from ... import contract
from ..emitter import Emitter
from ..nodes import LoweringError
from .common import E4M3_MAX, FP8_BLOCK, constant, expect_shape


def lower(e: Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
    n, k = int(a["n"]), int(a["k"])
    weight = constant(node, 1, "weight", key)
    scale = constant(node, 2, "weight_scale", key).astype(np.float32)
    expect_shape(weight, (n, k), "weight", key, node)
    codes = weight.view(np.uint8).T.copy().view(ml_dtypes.float8_e4m3fn)
    granularity = a["weight_scale_granularity"]
    if granularity == "channel":
        expect_shape(scale, (n,), "weight_scale", key, node)
        w = e.dequantize(codes, scale, axis=1)
    elif granularity == "block128":
        nb, kb = contract.ceil_div(n, FP8_BLOCK), contract.ceil_div(k, FP8_BLOCK)
        expect_shape(scale, (nb, kb), "weight_scale", key, node)
        per_column = np.repeat(scale.T, FP8_BLOCK, axis=1)[:, :n].copy()  # [kb, N]
        w = e.dequantize(codes, per_column, axis=0, block=FP8_BLOCK)
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
        sx_value = constant(node, 3, "input_scale", key).astype(np.float32).reshape(-1)
        expect_shape(sx_value, (1,), "input_scale", key, node)
        sx = e.f32("input_scale", sx_value.reshape(1, 1))
        xq = e.fp8_unit_qdq(e.op("Div", [x, sx]))
        return e.op("Mul", [e.op("MatMul", [xq, w]), sx]), 4
    if act == "row":
        sx = e.row_amax_scale(x, 1, E4M3_MAX)  # [M, 1]
        xq = e.fp8_unit_qdq(e.op("Div", [x, sx]))
        return e.op("Mul", [e.op("MatMul", [xq, w]), sx]), 3
    if act != "row_block128":
        raise LoweringError(
            f"node {key} (W8A8Proj): activation_scale_granularity {act!r}: expected row, "
            f"row_block128 or tensor"
        )
    kb = contract.ceil_div(k, FP8_BLOCK)
    padded = x
    if kb * FP8_BLOCK != k:
        padded = e.op("Pad", [x, e.i64("pads", [0, 0, 0, kb * FP8_BLOCK - k])])
    blocks = e.op("Reshape", [padded, e.i64("shape", [-1, kb, FP8_BLOCK])])
    sx = e.row_amax_scale(blocks, 2, E4M3_MAX)  # [M, kb, 1]
    xq = e.op("Mul", [e.fp8_unit_qdq(e.op("Div", [blocks, sx])), sx])
    xq = e.op("Reshape", [xq, e.i64("shape", [-1, kb * FP8_BLOCK])])
    if kb * FP8_BLOCK != k:
        xq = e.op("Slice", [xq, e.i64("starts", [0]), e.i64("ends", [k]), e.i64("axes", [1])])
    return e.op("MatMul", [xq, w]), 3
