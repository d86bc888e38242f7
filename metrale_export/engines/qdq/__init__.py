"""The qdq lowering of the projections, one module per weight format: standard ONNX that
TensorRT builds with no plugin, DequantizeLinear of the stored weights + MatMul, with the
activation formats emulated as the contract defines them (``lower_projection``; lowering.py runs
it over a graph).

How each weight format is stored: one module each (``w4a16``, ``w8a8``, ``w4a4``), weights
transposed to [K, N] so MatMul needs no Transpose; ``common`` holds what they share (reading an
initializer, checking its shape, unpacking nibbles).

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

import numpy as np
import onnx_graphsurgeon as gs

from ..emitter import Emitter, np_dtype
from . import w4a4, w4a16, w8a8
from .common import constant, expect_shape

# op type -> its weight format's lowering: (emitter, node, attributes, key, activation format, x)
# -> (float32 product, index of the node's next input).
_LOWER = {"W4A16Proj": w4a16.lower, "W8A8Proj": w8a8.lower, "W4A4Proj": w4a4.lower}


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
        bias = constant(node, next_input, "bias", key).astype(np.float32)
        expect_shape(bias, (int(a["n"]),), "bias", key, node)
        acc = e.op("Add", [acc, e.f32("bias", bias)])
    # The output has X's dtype (docs/ops.md): CastLike needs no dtype known at lowering time.
    e.op("CastLike", [acc, x_in], out=y)
    if dtype is not None:
        y.dtype = dtype
    if store is not None:
        store.release(node.inputs)
    node.inputs.clear()
