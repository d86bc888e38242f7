"""The op contract as a C/C++ header: ``plugins/include/metrale/contract.h``, generated from
:mod:`metrale_export.contract` by ``python -m metrale_export.contract --write`` (with
``plugins/contract.json``), so the kernels, the TensorRT plugins and the conformance harness read
the contract's facts instead of restating them.

What it holds: the kernels' C enums (``C_ENUMS``, C-compatible, for include/metrale/kernels.h);
in ``namespace metrale::contract`` the domain, its version, the families, the scalar-format
constants and blocks, one ``struct <op_type>`` per op of ``OPS`` (type, version, activation formats
and default, whether it has a plugin, the dense op of a grouped one, each retired version and what
changed, the compatible version, the fields in contract order with their types and defaults, each enumerated field's values
in code order, the inputs after x with dtype, gate and shape, and the outputs with dtype, gate and shape) and ``kOPS``, every op's identity.
Each op's struct is a line of scalar facts (``METRALE_CONTRACT_OP``, defined once at the top with
what each member means) and a line a table, so the generated text repeats no multi-line shape.

Invariants:
- the text is a pure function of the contract (no dates, no paths): regenerating an unchanged
  contract gives the same bytes, and tests/contract fails when the file is not current;
- every op of ``OPS`` appears, with no per-op code here: an op added to the contract is in the
  header after regenerating; a type the generator cannot spell (an attribute or input dtype it does
  not know) is an error naming the op and the attribute, never skipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .. import contract as c

HEADER_PATH = Path(__file__).resolve().parents[2] / "plugins" / "include" / "metrale" / "contract.h"

# contract attribute type -> the header's FieldType (TensorRT: kINT32, kCHAR, kFLOAT32).
_FIELD_TYPES = {"int": "kINT", "string": "kSTRING", "float": "kFLOAT"}
# ONNX dtype name of an input -> the header's TensorType ("x": the dtype of x).
_TENSOR_TYPES = {"float32": "kFLOAT32", "float16": "kFLOAT16", "bfloat16": "kBFLOAT16", "int8": "kINT8",
                 "uint8": "kUINT8", "int32": "kINT32", "int64": "kINT64", "bool": "kBOOL", "x": "kLIKE_X"}


def _str(s: str | None) -> str:
    return "nullptr" if s is None else json.dumps(s)  # a JSON string is a valid C string literal here


def _float(v: float) -> str:
    return f"{float(v)!r}f"


def _const(name: str) -> str:
    """kNAME for an attribute name (``weight_scale_granularity`` -> ``kWEIGHT_SCALE_GRANULARITY``)."""
    return "k" + re.sub(r"\W", "_", name).upper()


def _strings(values) -> str:
    return "{" + ", ".join(_str(v) for v in values) + "}"


def _c_enums() -> list[str]:
    out = []
    for name, prefix, values in c.C_ENUMS:
        labels = ", ".join(f"kMETRALE_{prefix}{re.sub(r'[^0-9A-Za-z]', '_', str(v)).upper()} = {i}"
                           for i, v in enumerate(values))
        out.append(f"enum {name} {{ {labels} }};")
    return out


def _field(spec: c.OpSpec, a: c.Attribute) -> str:
    kind = _FIELD_TYPES.get(a.type)
    if kind is None:
        raise ValueError(f"{spec.op_type}.{a.name}: attribute type {a.type!r} has no C++ spelling in "
                         f"contract/header.py's _FIELD_TYPES (known: {', '.join(_FIELD_TYPES)})")
    required = "true" if a.default is None else "false"
    d = a.default
    int_default = str(int(d)) if a.type == "int" and d is not None else "0"
    float_default = _float(d) if a.type == "float" and d is not None else "0.0f"
    str_default = _str(d) if a.type == "string" and d is not None else "nullptr"
    return f"{{{_str(a.name)}, FieldType::{kind}, {required}, {int_default}, {float_default}, {str_default}}}"


def _values(spec: c.OpSpec, a: c.Attribute) -> str:
    if a.type == "string":
        return f"static constexpr char const* {_const(a.name)}_VALUES[]{_strings(a.values)};"
    if a.type == "int":
        return f"static constexpr int32_t {_const(a.name)}_VALUES[]{{{', '.join(str(int(v)) for v in a.values)}}};"
    return f"static constexpr float {_const(a.name)}_VALUES[]{{{', '.join(_float(v) for v in a.values)}}};"


def _tensor_type(spec: c.OpSpec, what: str, t: c.Input | c.Output) -> str:
    """The TensorType of an input's or output's dtype; a dtype with no C++ spelling is refused."""
    kind = _TENSOR_TYPES.get(t.dtype)
    if kind is None:
        raise ValueError(f"{spec.op_type}: {what} {t.name!r} has dtype {t.dtype!r}, which has no C++ spelling in "
                         f"contract/header.py's _TENSOR_TYPES (known: {', '.join(_TENSOR_TYPES)})")
    return kind


def _input(spec: c.OpSpec, i: c.Input) -> str:
    kind = _tensor_type(spec, "input", i)
    shape = "[" + ", ".join(i.shape) + "]"
    gate_value = None if i.gate_value == 1 else str(i.gate_value)
    return f"{{{_str(i.name)}, TensorType::{kind}, {_str(i.gate)}, {_str(gate_value)}, {_str(shape)}}}"


def _output(spec: c.OpSpec, o: c.Output) -> str:
    kind = _tensor_type(spec, "output", o)
    shape = "[" + ", ".join(o.shape) + "]"
    return f"{{{_str(o.name)}, TensorType::{kind}, {_str(o.gate)}, {_str(shape)}}}"


def _retired(spec: c.OpSpec) -> list[tuple[str, str]]:
    """(version, what changed since) of every retired version of ``spec``, oldest first."""
    older = sorted(v for (t, v) in c.OLDER_VERSIONS if t == spec.op_type)
    return [(str(v), c.OLDER_VERSIONS[(spec.op_type, v)]) for v in older]


def _table(entries) -> str:
    return "{" + ", ".join(entries) + "}"


def _op(spec: c.OpSpec) -> list[str]:
    """One op's struct: a line of scalar facts (METRALE_CONTRACT_OP), then a line a table; what each
    member means is said once, at METRALE_CONTRACT_OP and the table structs."""
    retired = _retired(spec)
    # Null-terminated (C++ has no empty arrays): kNB_RETIRED entries, then {nullptr, nullptr}.
    entries = "".join(f"{{{_str(v)}, {_str(change)}}}, " for v, change in retired) + "{nullptr, nullptr}"
    older = c.compatible_version(spec)
    compatible = None if older is None else str(older)
    facts = ", ".join((_str(spec.op_type), str(spec.version), _str(str(spec.version)), _str(spec.kind),
                       _str(spec.x_name), "true" if spec.has_plugin else "false", _str(spec.grouped_of),
                       str(len(retired)), _str(compatible), _str(spec.default_activation)))
    values = " ".join(_values(spec, a) for a in spec.attributes if a.values is not None)
    lines = [
        f"//! {spec.op_type}: {spec.weights} weights ({spec.kind}). {' '.join(spec.doc.split())}".rstrip(),
        f"struct {spec.op_type}",
        "{",
        f"    METRALE_CONTRACT_OP({facts}); static constexpr Retired kRETIRED[]{{{entries}}}; "
        f"static constexpr char const* kACTIVATION_FORMATS[]{_strings(spec.activation_formats)};",
        f"    static constexpr Field kFIELDS[]{_table(_field(spec, a) for a in spec.attributes)};",
        *([f"    {values}"] if values else []),
        f"    static constexpr Input kINPUTS[]{_table(_input(spec, i) for i in spec.inputs)};",
        f"    static constexpr Output kOUTPUTS[]{_table(_output(spec, o) for o in spec.outputs)};",
        "};",
        "",
    ]
    return lines


def to_header() -> str:
    """The text of plugins/include/metrale/contract.h."""
    ops = list(c.OPS.values())
    head = [
        "/*",
        " * GENERATED from the package metrale_export/contract/ (the ops in contract/ops.py, the scalar",
        " * formats and blocks in contract/numerics.py, the retired versions in contract/versions.py) by",
        " * `python -m metrale_export.contract --write`:",
        " * do not edit (tests/contract fails when this file differs from what the contract generates).",
        " *",
        " * The metrale op contract (docs/ops.md) for the C++ side: the kernels' argument codes (C), and in",
        " * metrale::contract (C++17) the domain, the scalar-format constants, and per op its type, version,",
        " * activation formats, fields with types and defaults, enumerated values and inputs.",
        " */",
        "#ifndef METRALE_CONTRACT_H",
        "#define METRALE_CONTRACT_H",
        "",
        "/* The kernels' enum codes: a value's code is its index in the contract's list. */",
        *_c_enums(),
        "",
        "#ifdef __cplusplus",
        "#include <cstdint>",
        "",
        "namespace metrale",
        "{",
        "namespace contract",
        "{",
        "",
        f"constexpr char const* kDOMAIN{{{_str(c.DOMAIN)}}};",
        f"constexpr int32_t kDOMAIN_VERSION{{{c.domain_version()}}};",
        f"constexpr char const* kFAMILIES[]{_strings(c.FAMILIES)};",
        f"constexpr char const* kX_DTYPES[]{_strings(c.X_DTYPES)};",
        f"constexpr char const* kACTIVATION_FORMATS[]{_strings(c.ACTIVATION_FORMATS)};",
        "",
        "// Scalar formats and blocks (docs/ops.md, Arithmetic).",
        f"constexpr float kE4M3_MAX{{{_float(c.E4M3_MAX)}}};",
        f"constexpr float kE2M1_MAX{{{_float(c.E2M1_MAX)}}};",
        f"constexpr float kE2M1_VALUES[]{{{', '.join(_float(v) for v in c.E2M1_VALUES)}}};",
        f"constexpr float kNVFP4_GLOBAL_DIVISOR{{{_float(c.NVFP4_GLOBAL_DIVISOR)}}};",
        f"constexpr int32_t kFP8_BLOCK{{{c.FP8_BLOCK}}};",
        f"constexpr int32_t kNVFP4_BLOCK{{{c.NVFP4_BLOCK}}};",
        f"constexpr int32_t kRMSNORM_BLOCK{{{c.RMSNORM_BLOCK}}};  // RMSNorm: threads a row beyond one warp",
        f"constexpr double kLOG2E{{{c.LOG2E!r}}};  // Attention: scale_log2 = float32(float32(scale) * kLOG2E)",
        f"constexpr float kGDN_L2NORM_EPS{{{_float(c.GDN_L2NORM_EPS)}}};  // GatedDeltaRule: q, k l2norm epsilon",
        f"constexpr float kGDN_SOFTPLUS_THRESHOLD{{{_float(c.GDN_SOFTPLUS_THRESHOLD)}}};  // softplus(u) = u above it",
        f"constexpr int32_t kGDN_HEAD_V_BLOCK{{{c.GDN_HEAD_V_BLOCK}}};  // GatedDeltaRule: dv a multiple of it on CUDA",
        f"constexpr int32_t kGDN_STATE_PART{{{c.GDN_STATE_PART}}};  // GatedDeltaRule: dk elements a part of the state sums",
        f"constexpr int32_t kGDN_MAX_CONV_KERNEL{{{max(c.GDN_CONV_KERNELS)}}};  // CausalConv1d: the most taps on CUDA",
        f"constexpr int32_t kGDN_CONV_KERNELS[]{{{', '.join(map(str, c.GDN_CONV_KERNELS))}}};  // CausalConv1d: kernel_size on CUDA",
        f"constexpr int32_t kGDN_HEAD_K_DIMS[]{{{', '.join(map(str, c.GDN_HEAD_K_DIMS))}}};  // GatedDeltaRule: head_k_dim on CUDA",
        "",
        "// What the CUDA kernels serve beyond the contract: K a multiple of this (KERNEL_K_MULTIPLE).",
        *(f"constexpr int32_t k{t.upper()}_KERNEL_K_MULTIPLE{{{v}}};" for t, v in c.KERNEL_K_MULTIPLE.items()),
        "",
        "enum class FieldType : int32_t { kINT, kSTRING, kFLOAT };",
        "enum class TensorType : int32_t",
        "{",
        "    kFLOAT32, kFLOAT16, kBFLOAT16, kINT8, kUINT8, kINT32, kINT64, kBOOL, kLIKE_X",
        "};",
        "",
        "//! One field: required ones have no default; otherwise the default of its type applies.",
        "struct Field",
        "{",
        "    char const* name;",
        "    FieldType type;",
        "    bool required;",
        "    int32_t intDefault;",
        "    float floatDefault;",
        "    char const* stringDefault;",
        "};",
        "",
        "//! One input after x: gate is the field that says whether an optional one is present (nullptr:",
        "//! always present): an int gate (has_*) when it is 1 (gateValue nullptr), an enumerated one when it",
        "//! has the value gateValue; shape is the contract's expression of the fields, for messages.",
        "struct Input",
        "{",
        "    char const* name;",
        "    TensorType type;",
        "    char const* gate;",
        "    char const* gateValue;",
        "    char const* shape;",
        "};",
        "",
        "//! One output: gate is the int field that says whether an optional one is present (nullptr:",
        "//! always present); shape is the contract's expression (\"...\": x's leading dimensions), for messages.",
        "struct Output",
        "{",
        "    char const* name;",
        "    TensorType type;",
        "    char const* gate;",
        "    char const* shape;",
        "};",
        "",
        "//! A retired op version: the plugin version a graph may name and what changed since (refused).",
        "struct Retired",
        "{",
        "    char const* version;",
        "    char const* change;",
        "};",
        "",
        "//! An op's scalar facts, the first line of its struct below: kOP_TYPE, its ONNX op type;",
        "//! kVERSION_NUMBER and kVERSION, the op version and as the TensorRT plugin version string; kKIND;",
        "//! kX_NAME, the name of the first input (x, the router's logits, attention's q), for messages;",
        "//! kHAS_PLUGIN; kGROUPED_OF, the dense op each expert computes (grouped-expert ops), else nullptr;",
        "//! kNB_RETIRED, the entries of kRETIRED before its null one; kCOMPATIBLE_VERSION, the older version",
        "//! whose nodes this version reads as they are (only new attribute values since), registered as a",
        "//! second creator (nullptr: none); kDEFAULT_ACTIVATION. On the same line kRETIRED, the older",
        "//! versions a graph may name, each refused with what changed since (oldest first, then a null",
        "//! entry), and kACTIVATION_FORMATS. Then a line a table: kFIELDS, the fields (ONNX attributes) in",
        "//! contract order, the plugins' field list; each enumerated field's values in the order of its code",
        "//! (the kernels' enum), k<FIELD>_VALUES; kINPUTS, the inputs after x, positional (an optional one is",
        "//! present when its gate field is 1, or has the value gateValue); kOUTPUTS, the outputs, positional",
        "//! (an optional one is present when its gate field is 1).",
        "#define METRALE_CONTRACT_OP(opType, versionNumber, version, kind, xName, hasPlugin, groupedOf, nbRetired, \\",
        "    compatibleVersion, defaultActivation)                                                               \\",
        "    static constexpr char const* kOP_TYPE{opType};                                                      \\",
        "    static constexpr int32_t kVERSION_NUMBER{versionNumber};                                            \\",
        "    static constexpr char const* kVERSION{version};                                                     \\",
        "    static constexpr char const* kKIND{kind};                                                           \\",
        "    static constexpr char const* kX_NAME{xName};                                                        \\",
        "    static constexpr bool kHAS_PLUGIN{hasPlugin};                                                       \\",
        "    static constexpr char const* kGROUPED_OF{groupedOf};                                                \\",
        "    static constexpr int32_t kNB_RETIRED{nbRetired};                                                    \\",
        "    static constexpr char const* kCOMPATIBLE_VERSION{compatibleVersion};                                \\",
        "    static constexpr char const* kDEFAULT_ACTIVATION{defaultActivation}",
        "",
        "//! The number of entries of a contract array.",
        "template <typename T, int32_t N>",
        "constexpr int32_t count(T const (&)[N])",
        "{",
        "    return N;",
        "}",
        "",
    ]
    info = [
        "//! Which op is which: type, plugin version, whether a plugin exists, the retired versions",
        "//! (nbRetired of them), the compatible version (nullptr: none) and the fields in contract order.",
        "struct OpInfo",
        "{",
        "    char const* type;",
        "    char const* version;",
        "    bool hasPlugin;",
        "    Retired const* retired;",
        "    int32_t nbRetired;",
        "    char const* compatibleVersion;",
        "    Field const* fields;",
        "    int32_t nbFields;",
        "};",
        "",
    ]
    body = [line for spec in ops for line in _op(spec)]
    table = ["//! An op's identity.",
             "template <typename Op>",
             "constexpr OpInfo opInfo()",
             "{",
             "    return {Op::kOP_TYPE, Op::kVERSION, Op::kHAS_PLUGIN, Op::kRETIRED, Op::kNB_RETIRED, "
             "Op::kCOMPATIBLE_VERSION, Op::kFIELDS, count(Op::kFIELDS)};",
             "}",
             "",
             "//! Every op of the contract.",
             f"constexpr OpInfo kOPS[]{{{', '.join(f'opInfo<{o.op_type}>()' for o in ops)}}};",
             "",
             "#undef METRALE_CONTRACT_OP",
             ""]
    tail = ["} // namespace contract", "} // namespace metrale", "#endif /* __cplusplus */", "",
            "#endif /* METRALE_CONTRACT_H */"]
    return "\n".join(head + body + info + table + tail) + "\n"
