"""The graph-building helper of the rewrites: ``Emitter`` adds the standard-ONNX nodes of one
lowered op under a name prefix (constants, initializer checks, and the building blocks the
formats share: bfloat16 rounding, blocked DequantizeLinear, the unit FP8 Q/DQ pair, row amax
scales and e2m1 rounding). The qdq formats (qdq/) and the expansions (expand.py) both use it.

Invariants: every node and constant gets a name under the prefix, unique within one Emitter;
with a store, constants of ``store.inline_bytes`` or more go to disk as they are made.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto
from onnx import numpy_helper

from .nodes import LoweringError


def np_dtype(dtype) -> np.dtype:
    """gs dtypes (numpy or ONNX enums) -> numpy (bfloat16 via ml_dtypes)."""
    if dtype is None:
        return None
    if isinstance(dtype, int):
        return onnx.helper.tensor_dtype_to_np_dtype(dtype)
    return np.dtype(dtype)


class Emitter:
    """Adds the nodes of one lowered op to the graph under a name prefix."""

    def __init__(self, graph: gs.Graph, prefix: str, store=None):
        self.graph = graph
        self.store = store  # weights_file.WeightsFile: large constants go to disk as they are made
        self.prefix = re.sub(r"[^A-Za-z0-9_.]", "_", prefix)
        self.count = 0

    def name(self, what: str) -> str:
        self.count += 1
        return f"{self.prefix}/{what}_{self.count}"

    def const(self, what: str, value: np.ndarray) -> gs.Constant:
        arr = np.asarray(value)
        if self.store is not None and arr.nbytes >= self.store.inline_bytes:
            return self.store.constant(self.name(what), arr)
        if arr.dtype in (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.float8_e4m3fn)):
            # gs writes one byte per element for these; let onnx pack them.
            name = self.name(what)
            return gs.Constant(name, gs.ir.tensor.LazyValues(numpy_helper.from_array(arr, name)))
        return gs.Constant(self.name(what), arr)

    def initializer(self, t, what: str, key: str, op: str, shape: tuple, dtype=None) -> np.ndarray:
        """The values of an op input that must be an initializer of ``shape`` (and ``dtype``, when
        given): a weight the lowering transforms; a LoweringError naming the node and the input."""
        if not isinstance(t, gs.Constant):
            found = "missing" if t is None else f"a computed tensor {t.name!r}"
            raise LoweringError(f"node {key} ({op}): {what} must be an initializer for the lowering, found {found}")
        arr = np.asarray(t.values)
        if tuple(arr.shape) != tuple(shape):
            raise LoweringError(f"node {key} ({op}): {what}: expected shape {list(shape)}, found {list(arr.shape)}")
        if dtype is not None and arr.dtype != np.dtype(dtype):
            raise LoweringError(f"node {key} ({op}): {what}: expected {np.dtype(dtype)}, found {arr.dtype}")
        return arr

    def f32(self, what: str, value) -> gs.Constant:
        return self.const(what, np.asarray(value, dtype=np.float32))

    def op(self, op: str, inputs: list, attrs: dict | None = None, out: gs.Variable | None = None):
        out = out if out is not None else gs.Variable(self.name(op.lower()))
        self.graph.nodes.append(
            gs.Node(op, name=self.name(op), attrs=attrs or {}, inputs=inputs, outputs=[out])
        )
        return out

    def ops(self, op: str, inputs: list, attrs: dict | None, outs: list):
        """A node of several outputs (``outs``: Variables, or None for a new one each)."""
        outs = [o if o is not None else gs.Variable(self.name(f"{op.lower()}_{i}")) for i, o in enumerate(outs)]
        self.graph.nodes.append(gs.Node(op, name=self.name(op), attrs=attrs or {}, inputs=inputs, outputs=outs))
        return outs

    def i64(self, what: str, values) -> gs.Constant:
        return self.const(what, np.asarray(values, dtype=np.int64))

    # -- building blocks --
    def bf16_round(self, t):
        """bf16(t) as float32: two Casts."""
        b = self.op("Cast", [t], {"to": TensorProto.BFLOAT16})
        return self.op("Cast", [b], {"to": TensorProto.FLOAT})

    def dequantize(self, weight: np.ndarray, scale: np.ndarray, axis: int, block: int = 0):
        attrs = {"axis": axis}
        if block:
            attrs["block_size"] = block
        return self.op(
            "DequantizeLinear", [self.const("w", weight), self.f32("w_scale", scale)], attrs
        )

    def fp8_unit_qdq(self, t):
        """e4m3(t) as float32 (saturating RNE) through a Q/DQ pair with a constant scale of 1."""
        one = self.f32("one", 1.0)
        zero = self.const("fp8_zero", np.zeros((), dtype=ml_dtypes.float8_e4m3fn))
        q = self.op("QuantizeLinear", [t, one, zero], {"saturate": 1})
        return self.op("DequantizeLinear", [q, self.f32("one", 1.0)])

    def row_amax_scale(self, t, axis: int, divisor: float):
        """amax / divisor over ``axis`` (kept), with 1 where amax is 0."""
        amax = self.op("ReduceMax", [self.op("Abs", [t]), self.i64("axes", [axis])], {"keepdims": 1})
        positive = self.op("Greater", [amax, self.f32("zero", 0.0)])
        scaled = self.op("Div", [amax, self.f32("div", divisor)])
        return self.op("Where", [positive, scaled, self.f32("one", 1.0)])

    def e2m1_round(self, v):
        """e2m1(v) as float32: RNE on the grid's spacings 0.5 ([0,2)), 1 ([2,4)), 2 ([4,6]), saturating.

        Round is round-half-to-even, and on each spacing the even multiple is the even code, which
        gives the contract's ties (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4).
        """
        mag = self.op("Abs", [v])
        half = self.op("Mul", [self.op("Round", [self.op("Mul", [mag, self.f32("two", 2.0)])]),
                               self.f32("half", 0.5)])
        unit = self.op("Round", [mag])
        two = self.op("Mul", [self.op("Round", [self.op("Mul", [mag, self.f32("half", 0.5)])]),
                              self.f32("two", 2.0)])
        r = self.op("Where", [self.op("Less", [mag, self.f32("four", 4.0)]), unit, two])
        r = self.op("Where", [self.op("Less", [mag, self.f32("two", 2.0)]), half, r])
        r = self.op("Min", [r, self.f32("six", 6.0)])
        return self.op("Mul", [self.op("Sign", [v]), r])
