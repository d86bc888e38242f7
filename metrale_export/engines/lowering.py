"""Graph rewrites before a build: the standard-ONNX ``qdq`` lowering and the plugin path's formats.

``lower_qdq`` replaces every ``metrale`` node (docs/ops.md) with standard ONNX that TensorRT builds
with no plugin: DequantizeLinear of the stored weights + MatMul, with the activation formats
emulated as the contract defines them. ``lower_plugins`` is the plugin path's rewrite (below);
``with_activation_formats`` only sets the projections' ``activation_format`` on a copy.

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

The non-projection ops (Attention, RMSNorm, FloatProj, Router) expand to their formulas in
standard ONNX (``expand.EXPANSIONS``, one rewrite per op type: MatMul, Softmax, ReduceMean and
TopK, whose reduction orders TensorRT chooses per tactic: what the qdq lowering does not promise).
``lower_plugins`` is the plugin lowering: one ``PLUGIN_REWRITES`` entry per kind of rewrite (set
the activation format, keep the plugin, or expand an op that has no plugin yet through the same
``expand.EXPANSIONS``).

Invariants: the lowered graph computes docs/ops.md's formulas up to the float32 accumulation order
(and, for fp8, float32 reassociation of the scales); it has no ``metrale`` node left; the default
opset becomes at least 21 (blocked DequantizeLinear, INT4) and the IR version at least 10.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import TensorProto
from onnx import numpy_helper
from onnx_graphsurgeon.logger import G_LOGGER as _GS_LOGGER

from .. import contract
from ..errors import InputError
from . import expand

DOMAIN = contract.DOMAIN
LOWERING_VERSION = 2  # bump when the qdq output changes, so cached engines rebuild
MIN_OPSET = 21
MIN_IR_VERSION = 10
_EXTERNAL_DATA_BYTES = 1 << 30  # save initializers to a side file above this

_E4M3_MAX = contract.E4M3_MAX
_NVFP4_GLOBAL = contract.NVFP4_GLOBAL_DIVISOR
_FP8_BLOCK = contract.FP8_BLOCK
_NVFP4_BLOCK = contract.NVFP4_BLOCK
_E2M1 = np.array(contract.E2M1_VALUES, dtype=np.float32)


class LoweringError(InputError):
    """A metrale node that does not follow docs/ops.md (attributes, inputs, shapes)."""


@dataclass(frozen=True)
class OpInfo:
    """What the policy needs of one metrale node; ``key`` names it in manifests and messages."""

    key: str
    op_type: str
    family: str
    activation_format: str
    n: int
    k: int


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _key(node: onnx.NodeProto, attrs: dict, index: int) -> str:
    if "name" in attrs and _text(attrs["name"]):
        return _text(attrs["name"])
    return node.name or f"{node.op_type}_{index}"


def contract_attributes(node_op: str, attrs: dict, key: str) -> dict:
    """A node's attributes checked against the contract, absent ones filled with their defaults.

    Refuses an unknown op type, an attribute the contract does not define for the op, a missing
    required one, a wrong type and a value outside the allowed ones, each with the node named.
    """
    if node_op not in contract.OPS:
        raise LoweringError(
            f"node {key}: unknown op type {DOMAIN}::{node_op}; expected one of "
            f"{', '.join(contract.op_types())} (docs/ops.md)"
        )
    spec = contract.op(node_op)
    attrs = _without_plugin_version(spec, attrs, key)
    unknown = sorted(set(attrs) - set(spec.attribute_names))
    if unknown:
        raise LoweringError(
            f"node {key} ({node_op}): attribute(s) {', '.join(unknown)} are not in the op contract; "
            f"{node_op} has {', '.join(spec.attribute_names)} (docs/ops.md)"
        )
    out = {}
    for a in spec.attributes:
        if a.name in attrs:
            out[a.name] = _attribute_value(a, attrs[a.name], f"node {key} ({node_op})")
        elif a.default is None:
            raise LoweringError(f"node {key} ({node_op}): attribute {a.name!r} is missing")
        else:
            out[a.name] = a.default
    return out


def _without_plugin_version(spec, attrs: dict, key: str) -> dict:
    """``attrs`` less ``plugin_version``, TensorRT's plugin lookup key (docs/ops.md), not an op
    attribute; it must name the node's version."""
    if not (contract.names_plugin_version(spec) and "plugin_version" in attrs):
        return attrs
    attrs = dict(attrs)
    found = _text(attrs.pop("plugin_version"))
    want = str(spec.node_version(attrs))
    if found != want:
        raise LoweringError(f"node {key} ({spec.op_type}): plugin_version {found!r}: expected "
                            f"{want!r} (docs/ops.md)")
    return attrs


def _attribute_value(a, value, where: str):
    """One attribute's value as its contract type, refused when of another type or outside the
    allowed values."""
    if a.type == "string":
        if not isinstance(value, (str, bytes)):
            raise LoweringError(f"{where}: attribute {a.name!r}: expected a string, found {value!r}")
        value = _text(value)
    elif a.type == "float":
        if not isinstance(value, (float, int, np.floating, np.integer)) or isinstance(value, bool):
            raise LoweringError(f"{where}: attribute {a.name!r}: expected a float, found {value!r}")
        value = float(value)
    elif not isinstance(value, (int, np.integer)):
        raise LoweringError(f"{where}: attribute {a.name!r}: expected an int, found {value!r}")
    else:
        value = int(value)
    if a.values is not None and value not in a.values and not (a.default is not None and value == a.default):
        raise LoweringError(
            f"{where}: attribute {a.name}={value!r}: expected one of "
            f"{', '.join(map(str, a.values))} (docs/ops.md)"
        )
    return value


def metrale_ops(model: onnx.ModelProto) -> list[OpInfo]:
    """The metrale projection nodes of the main graph, in graph order, checked against the contract
    (a graph of an older op contract is refused: ``contract.check_model``); the other metrale
    nodes are checked too, but have no activation format to choose and are not listed."""
    try:
        contract.check_model(model, "the ONNX graph")
    except InputError as e:
        raise LoweringError(str(e)) from e
    ops = []
    for i, node in enumerate(model.graph.node):
        if node.domain != DOMAIN:
            continue
        a = _attrs(node)
        key = _key(node, a, i)
        a = contract_attributes(node.op_type, a, key)
        if not contract.op(node.op_type).is_projection:
            continue  # norms, the float projection, the router: no activation format to choose
        ops.append(OpInfo(key, node.op_type, a["family"], a["activation_format"], a["n"], a["k"]))
    keys = [op.key for op in ops]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise LoweringError(f"metrale nodes share the names {dupes}; each projection needs its own")
    return ops


def with_activation_formats(model: onnx.ModelProto, formats: dict[str, str]) -> onnx.ModelProto:
    """A copy of ``model`` whose metrale projection nodes carry ``activation_format = formats[key]``
    (the first of the plugin lowering's rewrites; ``lower_plugins`` applies them all)."""
    out = copy.deepcopy(model)
    for i, node in enumerate(out.graph.node):
        if node.domain != DOMAIN or not contract.op(node.op_type).is_projection:
            continue
        key = _key(node, _attrs(node), i)
        if key not in formats:
            raise LoweringError(f"node {key}: no activation format chosen for it")
        for attr in node.attribute:
            if attr.name == "activation_format":
                attr.s = formats[key].encode()
    return out


# --- the qdq lowering ---------------------------------------------------------------------------


def _np_dtype(dtype) -> np.dtype:
    """gs dtypes (numpy or ONNX enums) -> numpy (bfloat16 via ml_dtypes)."""
    if dtype is None:
        return None
    if isinstance(dtype, int):
        return onnx.helper.tensor_dtype_to_np_dtype(dtype)
    return np.dtype(dtype)


class _Emitter:
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


def _lower_w4a16(e: _Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
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


def _lower_w8a8(e: _Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
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


def _lower_w4a4(e: _Emitter, node: gs.Node, a: dict, key: str, fmt: str, x):
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


# --- the plugin lowering: one entry per kind of rewrite -----------------------------------------


@dataclass(frozen=True)
class PluginRewrite:
    """One entry of the plugin lowering: ``can(spec)`` says whether it takes a node of that op
    (and why not); ``action`` what it does: "format" (the node stays a plugin, its
    activation_format set from the policy's choice), "plugin" (the node stays a plugin as
    exported) or "standard" (expanded to standard ONNX as the qdq lowering does: no plugin, so
    TensorRT chooses its reduction order, and ``invariance.audit`` lists it as left)."""

    name: str
    can: Callable[[contract.OpSpec], tuple[bool, str]]
    action: str


def _is_projection(spec):
    return spec.is_projection, "a quantized projection" if spec.is_projection else "not a projection"


def _has_plugin(spec):
    return spec.has_plugin, "a TensorRT plugin" if spec.has_plugin else f"{spec.op_type} has no TensorRT plugin yet"


def _expandable(spec):
    ok = spec.op_type in expand.EXPANSIONS
    return ok, "expanded to standard ONNX" if ok else f"{spec.op_type} has no standard-ONNX expansion"


# In priority order: the first entry whose ``can`` holds takes the node. An op that gets a plugin
# (Attention, RMSNorm, ... once ``has_plugin``) moves from the third entry to the second.
PLUGIN_REWRITES: list[PluginRewrite] = [
    PluginRewrite("activation format", _is_projection, "format"),
    PluginRewrite("plugin as exported", _has_plugin, "plugin"),
    PluginRewrite("standard ONNX (no plugin yet)", _expandable, "standard"),
]


def plugin_plan(model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """Node key -> (action, the entry's name) for every metrale node of the main graph, or a
    LoweringError naming a node no entry takes, with each entry's reason."""
    plan = {}
    for i, node in enumerate(model.graph.node):
        if node.domain != DOMAIN:
            continue
        key = _key(node, _attrs(node), i)
        spec = contract.op(node.op_type) if node.op_type in contract.OPS else None
        if spec is None:
            contract_attributes(node.op_type, _attrs(node), key)  # raises: unknown op type
        reasons = []
        for entry in PLUGIN_REWRITES:
            ok, why = entry.can(spec)
            if ok:
                plan[key] = (entry.action, entry.name)
                break
            reasons.append(f"{entry.name}: {why}")
        else:
            raise LoweringError(f"node {key} ({node.op_type}): the plugin lowering cannot take it ({'; '.join(reasons)})")
    return plan


def lower_plugins(model: onnx.ModelProto, formats: dict[str, str]) -> onnx.ModelProto:
    """The plugin lowering: a copy of ``model`` in which each metrale node is rewritten by its
    ``PLUGIN_REWRITES`` entry (``plugin_plan``): projections get ``formats[key]``, plugins stay as
    exported, the others are expanded to standard ONNX (``expand.EXPANSIONS``)."""
    plan = plugin_plan(model)
    out = with_activation_formats(model, formats)
    standard = {k for k, (action, _) in plan.items() if action == "standard"}
    if not standard:
        return out
    quiet = (_GS_LOGGER.severity, _GS_LOGGER.colors)
    _GS_LOGGER.severity, _GS_LOGGER.colors = _GS_LOGGER.ERROR, False
    try:
        return _expand_nodes(out, standard)
    finally:
        _GS_LOGGER.severity, _GS_LOGGER.colors = quiet


def _finish(model: onnx.ModelProto, out: onnx.ModelProto, raise_opset: bool) -> onnx.ModelProto:
    """``out``'s opsets and IR version after a rewrite of ``model``: the default opset at least
    MIN_OPSET when ``raise_opset``, the metrale domain dropped when no metrale node is left."""
    opsets = {o.domain: o.version for o in out.opset_import}
    if raise_opset:
        opsets[""] = max(opsets.get("", MIN_OPSET), MIN_OPSET)
    if not any(n.domain == DOMAIN for n in out.graph.node):
        opsets.pop(DOMAIN, None)
    del out.opset_import[:]
    out.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in sorted(opsets.items()))
    out.ir_version = max(model.ir_version, MIN_IR_VERSION)
    return out


def lower_qdq(model: onnx.ModelProto, formats: dict[str, str] | None = None, store=None) -> onnx.ModelProto:
    """A new model with every metrale node replaced by standard ONNX (module docstring).

    ``formats`` maps op keys (``metrale_ops``) to activation formats; ``None`` keeps each node's
    ``activation_format``. Formats outside the contract's table are refused. With ``store`` (a
    ``weights_file.WeightsFile``), ``model`` may be a header whose weights stay in their files:
    each is read when its node is lowered, and the lowered weights are written to ``store``.
    """
    # gs warns that it keeps FLOAT8E4M3FN constants as ONNX tensors: that is what we want.
    quiet = (_GS_LOGGER.severity, _GS_LOGGER.colors)
    _GS_LOGGER.severity, _GS_LOGGER.colors = _GS_LOGGER.ERROR, False
    try:
        return _lower_qdq(model, formats, store)
    finally:
        _GS_LOGGER.severity, _GS_LOGGER.colors = quiet


def _lower_qdq(model: onnx.ModelProto, formats: dict[str, str] | None, store=None) -> onnx.ModelProto:
    ops = {op.key: op for op in metrale_ops(model)}
    _refuse_grouped(ops.values())
    graph = gs.import_onnx(model)
    if store is not None:
        store.attach(graph)
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if node.domain != DOMAIN:
            continue
        key = _key_gs(node, dict(node.attrs), index[id(node)])
        a = contract_attributes(node.op, dict(node.attrs), key)
        if not contract.op(node.op).is_projection:
            if node.op not in expand.EXPANSIONS:
                raise LoweringError(f"node {key} ({node.op}): the qdq lowering has no standard-ONNX "
                                    f"expansion of it; build with the plugin backend")
            _expand_node(graph, node, a, key, store)
            continue
        fmt = formats.get(key) if formats is not None else ops[key].activation_format
        _lower_projection(graph, node, a, key, _allowed_format(node.op, key, fmt), store)
    graph.cleanup().toposort()
    return _finish(model, gs.export_onnx(graph), raise_opset=True)


def _refuse_grouped(ops) -> None:
    grouped = [op for op in ops if contract.op(op.op_type).grouped_of is not None]
    if grouped:
        op = grouped[0]
        raise LoweringError(
            f"node {op.key} ({op.op_type}) and {len(grouped) - 1} more grouped-expert nodes: the qdq "
            "lowering does not express the grouped-expert ops. Standard ONNX can route rows to experts "
            "only through data-dependent shapes (NonZero and a gather per expert) or by running every "
            "expert on every row (num_experts / top_k times the weight reads), and a static "
            "DequantizeLinear of an [E, N, K] weight followed by a per-row Gather materializes "
            "[M, top_k, N, K]; neither keeps what the op is for. Build with the plugin backend, or "
            "export this model with --moe-experts dense (one W*Proj node per expert), which lowers."
        )


def _allowed_format(op_type: str, key: str, fmt: str | None) -> str:
    if fmt is None:
        raise LoweringError(f"node {key}: no activation format chosen for it")
    allowed = contract.op(op_type).activation_formats
    if fmt not in allowed:
        raise LoweringError(
            f"node {key} ({op_type}): activation format {fmt!r} is not in the op contract's "
            f"table; {op_type} runs {' or '.join(allowed)}"
        )
    return fmt


def _lower_projection(graph: gs.Graph, node: gs.Node, a: dict, key: str, fmt: str, store=None) -> None:
    """Replace a projection node by its format's standard-ONNX product (``_LOWER``), its bias and
    the cast to X's dtype, writing the node's output."""
    x_in, y = node.inputs[0], node.outputs[0]
    dtype = _np_dtype(x_in.dtype) or _np_dtype(y.dtype)
    e = _Emitter(graph, f"{key}", store)
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


def _expand_node(graph: gs.Graph, node: gs.Node, a: dict, key: str, store=None) -> None:
    """Replace ``node`` by its ``expand.EXPANSIONS`` rewrite, writing the node's outputs (an absent
    optional output is a new tensor nothing reads)."""
    ins, outs = list(node.inputs), list(node.outputs)
    outs += [None] * (len(contract.op(node.op).outputs) - len(outs))
    node.inputs.clear()
    node.outputs.clear()
    expand.EXPANSIONS[node.op](_Emitter(graph, key, store), ins, outs, a, key)
    if store is not None:
        store.release(ins)


def _expand_nodes(model: onnx.ModelProto, keys: set[str]) -> onnx.ModelProto:
    """``model`` with the metrale nodes named by ``keys`` expanded to standard ONNX (``expand``)."""
    graph = gs.import_onnx(model)
    for i, node in enumerate(list(graph.nodes)):
        if node.domain != DOMAIN:
            continue
        key = _key_gs(node, dict(node.attrs), i)
        if key in keys:
            _expand_node(graph, node, contract_attributes(node.op, dict(node.attrs), key), key)
    graph.cleanup().toposort()
    return _finish(model, gs.export_onnx(graph), raise_opset=False)


def _key_gs(node: gs.Node, attrs: dict, index: int) -> str:
    name = attrs.get("name")
    if name is not None and _text(name):
        return _text(name)
    return node.name or f"{node.op}_{index}"


def save_model(model: onnx.ModelProto, path: Path) -> None:
    """Write ``model`` to ``path``, initializers in ``<name>.data`` beside it when large."""
    path = Path(path)
    size = sum(len(t.raw_data) for t in model.graph.initializer)
    if size > _EXTERNAL_DATA_BYTES:
        onnx.save_model(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
            location=path.name + ".data", size_threshold=1024,
        )
    else:
        onnx.save_model(model, str(path))
