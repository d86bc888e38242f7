"""The qdq lowering of W4A4Proj (NVFP4 weights).

Neither ONNX Runtime nor TensorRT before SM 10.0 runs FLOAT4E2M1, so the e2m1 values are
stored as FLOAT8E4M3FN (exactly: every e2m1 value is an e4m3 value) with the decoded per-16 scales,
blocked along K (block_size = 16); the global scale is a Mul. One byte a weight instead of half a
byte.

Invariants: reads only initializers (``common.constant``); returns the float32 product and the
index of the node's next input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs

from ..emitter import Emitter
from ..nodes import LoweringError
from .common import E2M1, NVFP4_BLOCK, NVFP4_GLOBAL, constant, e4m3_values, expect_shape, unpack_nibbles


def lower(e: Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
    n, k = int(a["n"]), int(a["k"])
    if k % NVFP4_BLOCK:
        raise LoweringError(f"node {key} (W4A4Proj): k={k} must be a multiple of {NVFP4_BLOCK}")
    weight = constant(node, 1, "weight", key)
    scale = constant(node, 2, "weight_scale", key)
    gw = constant(node, 3, "weight_global_scale", key).astype(np.float32).reshape(-1)
    expect_shape(weight, (n, k // 2), "weight", key, node)
    expect_shape(scale, (n, k // NVFP4_BLOCK), "weight_scale", key, node)
    expect_shape(gw, (1,), "weight_global_scale", key, node)
    c = unpack_nibbles(weight)
    values = np.where(c & 8, -E2M1[c & 7], E2M1[c & 7])
    codes = values.T.astype(ml_dtypes.float8_e4m3fn)  # exact
    factors = e.dequantize(codes, e4m3_values(scale).T.copy(), axis=0, block=NVFP4_BLOCK)
    idx = 4
    input_scale = None
    if a["has_input_scale"]:
        input_scale = constant(node, idx, "input_scale", key).astype(np.float32).reshape(-1)
        idx += 1
    if fmt == "bf16":
        w = e.bf16_round(e.op("Mul", [factors, e.f32("global_scale", gw)]))
        return e.op("MatMul", [x, w]), idx
    if input_scale is not None:
        ga = e.f32("input_scale", input_scale.reshape(1, 1))
    else:
        ga = e.row_amax_scale(x, 1, NVFP4_GLOBAL)  # [M, 1]
    ga3 = e.op("Unsqueeze", [ga, e.i64("axes", [2])])  # [M or 1, 1, 1]
    blocks = e.op("Reshape", [x, e.i64("shape", [-1, k // NVFP4_BLOCK, NVFP4_BLOCK])])
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
