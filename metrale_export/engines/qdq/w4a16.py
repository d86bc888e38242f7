"""The qdq lowering of W4A16Proj (int4 weights, group scales).

Symmetric: INT4 ``code - 8`` with the bfloat16 group scales widened to float32 (exact), blocked DequantizeLinear (axis 0, block_size = group_size), then ``bf16(w)``: the product
``(code - z) * s`` is exact in float32, so this is the contract's one rounding. TensorRT has no
UINT4 weights and no zero points in DequantizeLinear, so with zero points the weight stays INT4
``code - 8`` and a float32 per-group offset ``(8 - z) * s`` is added before the rounding (exact:
``(code - 8) * s + (8 - z) * s = (code - z) * s``). TensorRT(-RTX) keeps such INT4 constants
INT4 in the engine (measured: half a byte a weight). A partial last group is padded with zero
codes to a whole group and the activation with zero columns (Pad), so every block is whole.

Invariants: reads only initializers (``common.constant``); returns the float32 product and the
index of the node's next input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs

from ..emitter import Emitter
from ..nodes import LoweringError
from .common import constant, expect_shape, unpack_nibbles


def lower(e: Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
    n, k, g = int(a["n"]), int(a["k"]), int(a["group_size"])
    if g <= 0 or k % 2:
        raise LoweringError(f"node {key} (W4A16Proj): group_size {g} and an even k needed, found k={k}")
    groups = -(-k // g)
    weight = constant(node, 1, "weight", key)
    scale = constant(node, 2, "weight_scale", key)
    if scale.dtype != np.dtype(ml_dtypes.bfloat16):
        raise LoweringError(f"node {key} (W4A16Proj): weight_scale: expected bfloat16 (op version 2), "
                            f"found {scale.dtype}")
    scale = scale.astype(np.float32)  # exact
    expect_shape(weight, (n, k // 2), "weight", key, node)
    expect_shape(scale, (n, groups), "weight_scale", key, node)
    idx = 3
    q = (unpack_nibbles(weight).astype(np.int8) - 8).T  # [K, N] int4 codes - 8
    pad = groups * g - k
    if pad:  # a partial last group: zero codes and zero activations make it whole
        q = np.concatenate((q, np.zeros((pad, n), dtype=q.dtype)), axis=0)
        x = e.op("Pad", [x, e.i64("pads", [0, 0, 0, pad])])
    w = e.dequantize(q.astype(ml_dtypes.int4), scale.T.copy(), axis=0, block=g)
    if a["has_zero_point"]:
        # (code - z) * s = (code - 8) * s + (8 - z) * s: INT4 codes and a per-group offset, both
        # terms and their sum exact in float32 (|code - z| <= 15 times a bfloat16 scale).
        zp = constant(node, idx, "zero_point", key).astype(np.float32)
        expect_shape(zp, (n, groups), "zero_point", key, node)
        idx += 1
        offset = ((8.0 - zp) * scale).T.reshape(groups, 1, n)
        w = e.op("Reshape", [w, e.i64("shape", [groups, g, n])])
        w = e.op("Reshape", [e.op("Add", [w, e.f32("w_offset", offset)]), e.i64("shape", [groups * g, n])])
    return e.op("MatMul", [x, e.bf16_round(w)]), idx
