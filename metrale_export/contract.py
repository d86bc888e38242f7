"""The ``metrale`` op contract as data: the one home of every fact docs/ops.md states about the ops.

Torch-free and onnx-free (plain Python), so every floor imports it: the ONNX schemas and
translations, the torch and ONNX Runtime reference ops, the CUDA wrapper's argument codes, the
engine policy and lowering, the projection specs and the format readers all derive from it, and
``python -m metrale_export.contract --write`` exports it as ``plugins/contract.json``, against which
the C++ plugins' field tables and the conformance harness are checked (tests/plugins).

Model: TensorRT's ``plugin/*/*_PluginConfig.yaml`` (inputs, attribute types and options as data).

Invariants:
- one ``OpSpec`` per op type; its ``attributes`` are in the contract's order, which is the plugins'
  field order; ``inputs`` are positional, x first; an optional input is present exactly when its
  ``gate`` attribute (``has_<input>``) is 1, and ``gate`` attributes are never torch op arguments
  (they follow from which inputs are present);
- an attribute's ``values`` are in the order of the C enum the kernels take (``codes``);
- each op has its own ``version`` (the ONNX schema's since_version and the TensorRT plugin version);
  the domain's opset version is the largest of them, so bumping one op bumps the domain and leaves
  the others' schemas as they are.
Adding an op is adding an ``OpSpec`` to ``OPS`` (and its reference, kernels and plugin).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

DOMAIN = "metrale"

FAMILIES = ("attn", "ffn", "gdn", "moe", "head")
ACTIVATION_FORMATS = ("bf16", "fp8", "nvfp4")  # index = the kernels' MetraleActFormat code
X_DTYPES = ("float32", "float16", "bfloat16")  # index = the kernels' MetraleDType code

# Scalar formats and blocks (docs/ops.md, Arithmetic).
E4M3_MAX = 448.0
E2M1_MAX = 6.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitudes, indexed by code & 7
NVFP4_GLOBAL_DIVISOR = E2M1_MAX * E4M3_MAX  # 2688: a row's dynamic NVFP4 global scale is amax / this
FP8_BLOCK = 128  # block128 weight scales and row_block128 activation scales
NVFP4_BLOCK = 16  # k per e4m3 scale of W4A4Proj
GROUP_SIZES = (32, 64, 128)  # W4A16Proj group_size


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive ints: the number of blocks of ``b`` covering ``a`` (block scales)."""
    return -(-a // b)


@dataclass(frozen=True)
class Input:
    """One positional input after x: ``dtype`` as ONNX names it ("int8", "float32", ...; "x": the
    dtype of x), ``shape`` as expressions of the attributes, ``gate`` the attribute that says
    whether an optional one is present (``has_<name>``, or one the op takes anyway, e.g. combine)."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    gate: str | None = None
    doc: str = ""

    @property
    def optional(self) -> bool:
        return self.gate is not None


@dataclass(frozen=True)
class Attribute:
    """One attribute (= one plugin field): ``type`` is "int" (ONNX INT, TensorRT kINT32) or
    "string" (ONNX STRING, kCHAR); ``values`` the allowed values (None: any, see ``doc``);
    ``default`` what a reader assumes when the attribute is absent (None: required)."""

    name: str
    type: str
    values: tuple | None = None
    default: object = None
    doc: str = ""

    @property
    def is_gate(self) -> bool:
        return self.name.startswith("has_")


@dataclass(frozen=True)
class OpSpec:
    """One op of the domain: its type, the weight format it names, inputs, attributes, formats."""

    op_type: str
    kind: str  # the export's --weight-quantization name of the weight format
    version: int
    weights: str  # the weight format in words (messages)
    inputs: tuple[Input, ...]
    attributes: tuple[Attribute, ...]
    activation_formats: tuple[str, ...]
    default_activation: str
    doc: str = ""
    torch_op: str | None = None  # the torch custom op's name; None: "<kind>_proj"
    torch_input_order: tuple[str, ...] | None = None  # the torch op's input order; None: ``inputs``'
    grouped_of: str | None = None  # a grouped-expert op: the dense op each expert computes
    has_plugin: bool = True  # False: no TensorRT plugin yet (the plugin check skips it, saying so)

    @property
    def torch_name(self) -> str:
        """The torch custom op ``metrale::<torch_name>``."""
        return self.torch_op or f"{self.kind}_proj"

    @property
    def torch_inputs(self) -> tuple[str, ...]:
        """The torch op's tensor arguments after x, in its order."""
        return self.torch_input_order or tuple(i.name for i in self.inputs)

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise KeyError(f"{self.op_type}: no attribute {name!r}; it has {', '.join(self.attribute_names)}")

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    @property
    def int_attributes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes if a.type == "int")

    @property
    def string_attributes(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes if a.type == "string")

    @property
    def emitted_attributes(self) -> tuple[str, ...]:
        """The attribute order of an exported node: ints, then strings, each in contract order."""
        return self.int_attributes + self.string_attributes

    @property
    def torch_attributes(self) -> tuple[str, ...]:
        """The attributes that are torch op arguments (after the inputs): all but the has_* gates."""
        return tuple(a.name for a in self.attributes if not a.is_gate)

    @property
    def derived_gates(self) -> dict[str, str]:
        """has_* attribute -> the optional input whose presence sets it (not a torch argument)."""
        return {i.gate: i.name for i in self.inputs if i.optional and i.gate not in self.torch_attributes}

    @property
    def optional_inputs(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs if i.optional)

    def input(self, name: str) -> Input:
        for i in self.inputs:
            if i.name == name:
                return i
        raise KeyError(f"{self.op_type}: no input {name!r}")

    def present_inputs(self, attrs: dict) -> tuple[str, ...]:
        """The inputs after x a node with ``attrs`` has, in order (gates absent count as 0)."""
        return tuple(i.name for i in self.inputs if not i.optional or int(attrs.get(i.gate, 0)))

    def defaults(self) -> dict:
        return {a.name: a.default for a in self.attributes if a.default is not None}

    def codes(self, name: str) -> dict:
        """value -> the kernels' enum code (its index in the attribute's ``values``)."""
        values = self.attribute(name).values
        if values is None:
            raise KeyError(f"{self.op_type}.{name} has no enumerated values")
        return {v: i for i, v in enumerate(values)}


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
# Version 1 had float32 scales and group_size dividing k; its graphs are refused (``outdated``).
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

W8A8 = OpSpec(
    "W8A8Proj", "w8a8", 1, "FP8",
    inputs=(Input("weight", "int8", ("n", "k"), doc="FP8 e4m3fn bit patterns"),
            Input("weight_scale", "float32", ("n",), doc="[n] (channel) or [ceil(n/128), ceil(k/128)] (block128)"),
            _BIAS),
    attributes=(*_common_head(),
                Attribute("weight_scale_granularity", "string", ("channel", "block128"), "channel"),
                _act(("bf16", "fp8"), "fp8"),
                Attribute("activation_scale_granularity", "string", ("row", "row_block128"), "row",
                          "used when activation_format=fp8"),
                *_common_tail()),
    activation_formats=("bf16", "fp8"), default_activation="fp8", doc=_X_DOC)

W4A4 = OpSpec(
    "W4A4Proj", "w4a4", 1, "NVFP4",
    inputs=(Input("weight", "int8", ("n", "k/2"), doc="two e2m1 codes a byte, even k low"),
            Input("weight_scale", "int8", ("n", "k/16"), doc="e4m3fn bit patterns, one per 16 k"),
            Input("weight_global_scale", "float32", ("1",)),
            Input("input_scale", "float32", ("1",), "has_input_scale", "static activation global scale"),
            _BIAS),
    attributes=(*_common_head(),
                _act(("bf16", "nvfp4"), "nvfp4"),
                Attribute("has_input_scale", "int", (0, 1), 0),
                *_common_tail()),
    activation_formats=("bf16", "nvfp4"), default_activation="nvfp4", doc=_X_DOC)



def grouped(dense: OpSpec) -> OpSpec:
    """The grouped-expert op of ``dense`` (docs/ops.md, Grouped-expert ops): x, topk_ids, the dense
    op's inputs stacked with a leading expert axis, topk_weights (combine=1 only, last: ONNX wants
    optional inputs after the required ones); the dense attributes with the routing ones after k.
    Each expert computes the dense op; the torch op takes the routing inputs first."""
    stacked = tuple(dataclasses.replace(i, shape=("num_experts",) + (() if i.shape == ("1",) else i.shape))
                    for i in dense.inputs)
    inputs = (Input("topk_ids", "int32", ("m", "top_k"), doc="distinct expert ids in [0, num_experts) a row"),
              *stacked,
              Input("topk_weights", "x", ("m", "top_k"), "combine", "the routing weights of combine=1"))
    routing = (Attribute("num_experts", "int", doc="E, the stacked experts"),
               Attribute("top_k", "int", doc="experts a row"),
               Attribute("combine", "int", (0, 1), doc="1: sum the slots' outputs weighted by topk_weights"))
    return dataclasses.replace(
        dense, op_type=dense.op_type.replace("Proj", "MoEProj"), inputs=inputs,
        attributes=dense.attributes[:2] + routing + dense.attributes[2:],
        doc="x: [M, K] (combine=0) or [M, top_k, K] (combine=1); y: [M, top_k, N] or [M, N]",
        torch_op=f"{dense.kind}_moe_proj", torch_input_order=("topk_ids", "topk_weights", *(i.name for i in dense.inputs)),
        grouped_of=dense.op_type)


OPS: dict[str, OpSpec] = {op.op_type: op for op in (W4A16, W8A8, W4A4)}
OPS.update({g.op_type: g for g in map(grouped, (W4A16, W8A8, W4A4))})


def op_types() -> tuple[str, ...]:
    return tuple(OPS)


def op(op_type: str) -> OpSpec:
    """The spec of ``op_type``; a KeyError naming the known ops otherwise."""
    try:
        return OPS[op_type]
    except KeyError:
        raise KeyError(f"unknown op type {DOMAIN}::{op_type}; expected one of {', '.join(OPS)}") from None


def by_kind() -> dict[str, OpSpec]:
    """Weight format kind ("w4a16", ...) -> its dense op's spec."""
    return {o.kind: o for o in OPS.values() if o.grouped_of is None}


def grouped_by_kind() -> dict[str, OpSpec]:
    """Weight format kind -> its grouped-expert op's spec."""
    return {o.kind: o for o in OPS.values() if o.grouped_of is not None}


def op_type_of(kind: str) -> str | None:
    """The op type a projection of ``kind`` exports as (None for "none" or an unknown kind)."""
    spec = by_kind().get(kind)
    return spec.op_type if spec else None


def domain_version() -> int:
    """The opset version of the ``metrale`` domain: the newest op version."""
    return max(o.version for o in OPS.values())


# What changed in an op since an older version (the refusal of an older graph says it).
_V1_SCALES = "float32 group scales; version 2 stores them as bfloat16"
OLDER_VERSIONS = {("W4A16Proj", 1): _V1_SCALES, ("W4A16MoEProj", 1): _V1_SCALES}


def names_plugin_version(spec: OpSpec) -> bool:
    """Whether a node of ``spec`` carries the string attribute ``plugin_version`` (its version):
    a plugin op whose version is not TensorRT's default "1". TensorRT's ONNX parser finds the
    creator by it; it is not a plugin field."""
    return spec.has_plugin and spec.version > 1


def outdated(op_type: str, imported: int | None) -> str | None:
    """Why a node of ``op_type`` in a graph importing metrale opset ``imported`` cannot be read, or
    None: a graph older than the op's version follows an older layout and must be re-exported."""
    spec = OPS.get(op_type)
    if spec is None or imported is None or imported >= spec.version:
        return None
    change = OLDER_VERSIONS.get((op_type, imported), "an older layout")
    return (f"{op_type} of metrale op contract version {imported} ({change}); this metrale-export reads "
            f"{op_type} version {spec.version}: re-export the model with this metrale-export")


def check_model(model, where: str) -> None:
    """Raise ``InputError`` when ``model`` (an onnx ModelProto, read duck-typed) holds a metrale op
    older than this contract's version of it (docs/ops.md, Older exports)."""
    from .errors import InputError

    imported = next((int(o.version) for o in model.opset_import if o.domain == DOMAIN), None)
    for node in model.graph.node:
        if node.domain == DOMAIN:
            why = outdated(node.op_type, imported)
            if why:
                raise InputError(f"{where}: {why}")


def to_dict() -> dict:
    """The contract as plain data (the JSON the C++ side is checked against)."""
    return {
        "domain": DOMAIN,
        "domain_version": domain_version(),
        "families": list(FAMILIES),
        "activation_formats": list(ACTIVATION_FORMATS),
        "x_dtypes": list(X_DTYPES),
        "e4m3_max": E4M3_MAX,
        "e2m1_max": E2M1_MAX,
        "e2m1_values": list(E2M1_VALUES),
        "nvfp4_global_divisor": NVFP4_GLOBAL_DIVISOR,
        "fp8_block": FP8_BLOCK,
        "nvfp4_block": NVFP4_BLOCK,
        "ops": {t: _op_dict(o) for t, o in OPS.items()},
    }


def _op_dict(o: OpSpec) -> dict:
    d = asdict(o)
    d["inputs"] = [{**asdict(i), "shape": list(i.shape), "optional": i.optional} for i in o.inputs]
    d["attributes"] = [{**asdict(a), "values": None if a.values is None else list(a.values)}
                       for a in o.attributes]
    d["activation_formats"] = list(o.activation_formats)
    d["torch_name"] = o.torch_name
    d["torch_input_order"] = list(o.torch_inputs)
    return d


def to_json() -> str:
    return json.dumps(to_dict(), indent=2, sort_keys=True) + "\n"


JSON_PATH = Path(__file__).resolve().parents[1] / "plugins" / "contract.json"


def main(argv: list[str]) -> int:
    """``python -m metrale_export.contract [--write]``: print the JSON, or write plugins/contract.json."""
    if "--write" in argv:
        JSON_PATH.write_text(to_json())
        print(f"wrote {JSON_PATH}")
    else:
        sys.stdout.write(to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
