"""The C++ side of the op contract read back from the plugin sources and compared with the contract
(``plugins/contract.json``, made by ``python -m metrale_export.contract --write``).

``drift(contract_dict, plugins_dir)`` returns one line per disagreement (empty: none). It reads,
for each op in the contract, ``plugins/*/<op_type>Plugin.{h,cpp}``:
- the field table of ``fieldNames()`` (names, order, kINT32 / kCHAR),
- the names ``FieldReader`` accepts and the fields ``writeFields`` serializes (names, order, type),
- the activation formats and default given to ``parseCommonAttributes``,
- the defaults of ``getString``, every allowed value of an enumerated field as a literal,
- the plugin version (a ``kPLUGIN_VERSION`` in the op's header, else the common one) and namespace;
an op the contract marks ``has_plugin=False`` (no plugin yet) is skipped, and reported if one exists;
and, once: the families of ``projectionPlugin.cpp``, the C enums of ``include/metrale/kernels.h``
and the numeric constants of ``common/metraleNumerics.cuh``.
The reading is by regular expressions over TensorRT-style sources: a source that no longer matches
is reported as drift too (it never passes by finding nothing).
"""

from __future__ import annotations

import re
from pathlib import Path

_TYPES = {"int": "kINT32", "string": "kCHAR"}
_WRITERS = {"int": "addInt", "string": "addString"}
# C enum of kernels.h -> where its value order lives in the contract.
_ENUMS = {
    "MetraleDType": lambda c: c["x_dtypes"],
    "MetraleActFormat": lambda c: c["activation_formats"],
    "MetraleWeightScale": lambda c: _values(c, "W8A8Proj", "weight_scale_granularity"),
    "MetraleActScale": lambda c: _values(c, "W8A8Proj", "activation_scale_granularity"),
}
_CONSTANTS = {"kE4M3_MAX": "e4m3_max", "kE2M1_MAX": "e2m1_max", "kNVFP4_GLOBAL_DIV": "nvfp4_global_divisor",
              "kNVFP4_BLOCK": "nvfp4_block", "kFP8_BLOCK": "fp8_block"}


def _values(c: dict, op_type: str, attr: str):
    for a in c["ops"][op_type]["attributes"]:
        if a["name"] == attr:
            return a["values"]
    return None


def _strings(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _body(src: str, start: str) -> str | None:
    """The text from ``start`` to the end of its brace block (None when ``start`` is absent)."""
    i = src.find(start)
    if i < 0:
        return None
    j = src.index("{", i)
    depth = 0
    for pos in range(j, len(src)):
        depth += {"{": 1, "}": -1}.get(src[pos], 0)
        if depth == 0:
            return src[i:pos + 1]
    return src[i:]


def _op_drift(c: dict, op_type: str, spec: dict, plugins: Path) -> list[str]:
    found = sorted(plugins.glob(f"*/{op_type}Plugin.cpp"))
    if not spec.get("has_plugin", True):
        # The contract says this op has no plugin yet: one that exists must be declared.
        return [f"{found[0]}: a plugin exists, but the contract says {op_type} has_plugin=False"] if found else []
    if not found:
        return [f"{op_type}: no plugins/*/{op_type}Plugin.cpp for an op of the contract"]
    cpp_path = found[0]
    cpp = cpp_path.read_text()
    header = cpp_path.with_suffix(".h").read_text() if cpp_path.with_suffix(".h").exists() else ""
    where = cpp_path.relative_to(plugins.parent)
    out = []
    attrs = spec["attributes"]
    names = [a["name"] for a in attrs]

    table = _body(cpp, f"{op_type}Plugin::fieldNames()")
    fields = re.findall(r'\{\s*"(\w+)"\s*,\s*PluginFieldType::(\w+)\s*\}', table or "")
    want = [(a["name"], _TYPES[a["type"]]) for a in attrs]
    if fields != want:
        out.append(f"{where}: fieldNames() has {fields}, the contract {want}")

    create = _body(cpp, f"{op_type}Plugin::create(") or ""
    reader = re.search(r"FieldReader const \w+\(\s*fc,\s*\{([^}]*)\}", create)
    known = _strings(reader.group(1)) if reader else None
    if known != names:
        out.append(f"{where}: FieldReader accepts {known}, the contract's attributes are {names}")

    common = re.search(r"parseCommonAttributes\(\s*\w+,\s*\{([^}]*)\}\s*,\s*\"(\w+)\"\s*\)", create)
    if common is None:
        out.append(f"{where}: create() does not call parseCommonAttributes(reader, {{formats}}, \"default\")")
    else:
        formats, default = _strings(common.group(1)), common.group(2)
        if formats != spec["activation_formats"] or default != spec["default_activation"]:
            out.append(f"{where}: parseCommonAttributes gets formats {formats} default {default!r}, the "
                       f"contract {spec['activation_formats']} default {spec['default_activation']!r}")

    for name, default in re.findall(r'getString\(\s*"(\w+)"\s*,\s*"([^"]*)"\s*\)', create):
        a = next((a for a in attrs if a["name"] == name), None)
        if a is None:
            out.append(f"{where}: reads field {name!r}, which the contract does not define for {op_type}")
        elif a["default"] != default:
            out.append(f"{where}: field {name!r} defaults to {default!r}, the contract to {a['default']!r}")

    written = _body(cpp, f"{op_type}Plugin::writeFields(") or ""
    calls = re.findall(r'writer\.(addInt|addString)\(\s*"(\w+)"', written)
    want_calls = [(_WRITERS[a["type"]], a["name"]) for a in attrs]
    if calls != want_calls:
        out.append(f"{where}: writeFields() writes {calls}, the contract {want_calls}")

    common_attrs = {"activation_format", "family", "has_bias", "name", "n", "k"}
    for a in attrs:
        if a["values"] is None or a["name"] in common_attrs or a["values"] == [0, 1]:
            continue
        literals = set(_strings(cpp)) if a["type"] == "string" else set(re.findall(r"\b\d+\b", create))
        missing = [v for v in a["values"] if str(v) not in literals]
        if missing:
            out.append(f"{where}: field {a['name']!r}: the contract allows {a['values']}, the source never "
                       f"names {missing}")

    version = re.search(r'kPLUGIN_VERSION\{"(\w+)"\}', header) or re.search(
        r'kPLUGIN_VERSION\{"(\w+)"\}', (plugins / "common" / "pluginCommon.h").read_text())
    if version is None or version.group(1) != str(spec["version"]):
        out.append(f"{where}: plugin version {version.group(1) if version else None!r}, the contract's "
                   f"{op_type} version is {spec['version']}")
    return out


def drift(c: dict, plugins: Path) -> list[str]:
    """Every disagreement between the contract dict ``c`` and the plugin sources under ``plugins``."""
    plugins = Path(plugins)
    out = []
    for op_type, spec in c["ops"].items():
        out += _op_drift(c, op_type, spec, plugins)

    common_h = (plugins / "common" / "pluginCommon.h").read_text()
    ns = re.search(r'kPLUGIN_NAMESPACE\{"(\w+)"\}', common_h)
    if ns is None or ns.group(1) != c["domain"]:
        out.append(f"plugins/common/pluginCommon.h: namespace {ns.group(1) if ns else None!r}, the "
                   f"contract's domain {c['domain']!r}")

    proj = (plugins / "common" / "projectionPlugin.cpp").read_text()
    fam = re.search(r"kFAMILIES\[\]\s*=\s*\{([^}]*)\}", proj)
    if fam is None or _strings(fam.group(1)) != c["families"]:
        out.append(f"plugins/common/projectionPlugin.cpp: kFAMILIES {_strings(fam.group(1)) if fam else None}, "
                   f"the contract's families {c['families']}")

    kernels = (plugins / "include" / "metrale" / "kernels.h").read_text()
    for enum, values_of in _ENUMS.items():
        m = re.search(rf"enum {enum}\s*\{{([^}}]*)\}}", kernels)
        want = values_of(c)
        if m is None:
            out.append(f"plugins/include/metrale/kernels.h: enum {enum} not found")
            continue
        entries = re.findall(r"kMETRALE_(\w+?)\s*=\s*(\d+)", m.group(1))
        got = [None] * len(entries)
        for label, code in entries:
            if int(code) < len(got):
                got[int(code)] = label.split("_", 1)[1].lower() if enum != "MetraleDType" else label.lower()
        if got != [str(v).lower() for v in want]:
            out.append(f"plugins/include/metrale/kernels.h: enum {enum} codes {got}, the contract's order {want}")

    numerics = (plugins / "common" / "metraleNumerics.cuh").read_text()
    for name, key in _CONSTANTS.items():
        m = re.search(rf"constexpr \w+ {name}\s*=\s*([\d.]+)f?;", numerics)
        if m is None or float(m.group(1)) != float(c[key]):
            out.append(f"plugins/common/metraleNumerics.cuh: {name} = {m.group(1) if m else None}, the "
                       f"contract's {key} = {c[key]}")
    return out
