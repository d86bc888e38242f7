"""The C++ side of the op contract read back from the plugin sources and compared with the contract
(``plugins/contract.json``, made by ``python -m metrale_export.contract --write``).

``drift(contract_dict, plugins_dir)`` returns one line per disagreement (empty: none). Each op's
plugin is ``DenseProjPlugin<Format>`` or ``GroupedProjPlugin<Format>``, registered in
``common/pluginLibrary.cpp``, with its launcher call in ``plugins/*/<op_type>Plugin.cpp``; its facts
live in the format (``struct W4A16Format`` with ``kOP_TYPE`` / ``kGROUPED_OP_TYPE``, in
``plugins/*/*Plugin.{h,cpp}``) and the two templates. It reads:
- the field list: the template's ``visitFields`` with every ``visit*Fields`` helper and the format's
  ``visitFields`` expanded (names, order, ``intField`` kINT32 / ``stringField`` kCHAR), and that the
  creator's table (``fieldNames()``), the names ``FieldReader`` accepts and ``writeFields`` all
  derive from that one list,
- the activation formats and default (the format's ``kACTIVATION_FORMATS``, ``kDEFAULT_ACTIVATION``),
- the defaults of ``getString`` and every allowed value of an enumerated field as a literal (the
  format's ``parse`` and source),
- the plugin version (the format's ``kPLUGIN_VERSION``) and the namespace;
an op the contract marks ``has_plugin=False`` (no plugin yet) is skipped, and reported if one exists;
and, once: the families of ``pluginBase.cpp``, the C enums of ``include/metrale/kernels.h`` and the
numeric constants of ``common/metraleNumerics.cuh``.
The reading is by regular expressions over TensorRT-style sources: a source that no longer matches
is reported as drift too (it never passes by finding nothing).
"""

from __future__ import annotations

import re
from pathlib import Path

_TYPES = {"int": "kINT32", "string": "kCHAR"}
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


def _after_brace(body: str | None) -> str:
    """A function's body without its signature ('' for None)."""
    return "" if body is None else body[body.index("{") + 1:]


def _field_list(body: str, helpers: dict[str, str], depth: int = 0) -> list[tuple[str, str]]:
    """The (name, type) fields a visitFields body visits, in order, helpers expanded."""
    out = []
    for m in re.finditer(r'\b(?:\w+\.)?(intField|stringField)\(\s*"(\w+)"|\b(\w+(?:\.\w+)?)\(', body):
        if m.group(1):
            out.append((m.group(2), {"intField": "kINT32", "stringField": "kCHAR"}[m.group(1)]))
        elif m.group(3) in helpers and depth < 4:
            out += _field_list(helpers[m.group(3)], helpers, depth + 1)
    return out


def _formats(plugins: Path) -> dict[str, tuple[str, str, Path, str]]:
    """op type -> (layout template, format name, format header, format struct text)."""
    out = {}
    for header in sorted(plugins.glob("*/*Plugin.h")):
        src = header.read_text()
        for name in re.findall(r"^struct (\w+Format)\s*$", src, re.M):
            struct = _body(src, f"struct {name}\n") or ""
            for key, template in (("kOP_TYPE", "DenseProjPlugin"), ("kGROUPED_OP_TYPE", "GroupedProjPlugin")):
                m = re.search(rf'{key}\{{"(\w+)"\}}', struct)
                if m:
                    out[m.group(1)] = (template, name, header, struct)
    return out


def _op_drift(c: dict, op_type: str, spec: dict, plugins: Path, formats: dict, helpers: dict,
              templates: dict, library: str) -> list[str]:
    found = sorted(plugins.glob(f"*/{op_type}Plugin.cpp"))
    if not spec.get("has_plugin", True):
        # The contract says this op has no plugin yet: one that exists must be declared.
        return [f"{found[0]}: a plugin exists, but the contract says {op_type} has_plugin=False"] if found else []
    if not found:
        return [f"{op_type}: no plugins/*/{op_type}Plugin.cpp for an op of the contract"]
    if op_type not in formats:
        return [f"{found[0].relative_to(plugins.parent)}: no struct *Format in plugins/*/*Plugin.h names "
                f"{op_type} as its kOP_TYPE or kGROUPED_OP_TYPE"]
    template, fmt, header, struct = formats[op_type]
    creator = f"ProjectionPluginCreator<{template}<{fmt}>>"
    if creator not in library:
        return [f"plugins/common/pluginLibrary.cpp: {op_type} is not registered (expected a {creator})"]
    cpp_path = header.with_suffix(".cpp")
    cpp = cpp_path.read_text() if cpp_path.exists() else ""
    where = cpp_path.relative_to(plugins.parent)
    if template == "GroupedProjPlugin":
        where = f"{where} ({op_type})"
    out = []
    attrs = spec["attributes"]
    names = [a["name"] for a in attrs]

    # The one field list: fieldNames(), FieldReader and writeFields() all walk it (checked below).
    visit = _after_brace(_body(templates[template], "static void visitFields("))
    fields = _field_list(visit, dict(helpers, **{"format.visitFields": _after_brace(
        _body(struct, "void visitFields("))}))
    want = [(a["name"], _TYPES[a["type"]]) for a in attrs]
    if fields != want:
        out.append(f"{where}: the field list of {fmt}::visitFields (fieldNames(), FieldReader, writeFields()) "
                   f"has {fields}, the contract {want}")

    formats_ = re.search(r"kACTIVATION_FORMATS\[\]\{([^}]*)\}", struct)
    default = re.search(r'kDEFAULT_ACTIVATION\{"(\w+)"\}', struct)
    if formats_ is None or default is None:
        out.append(f"{where}: {fmt} has no kACTIVATION_FORMATS[]{{...}} and kDEFAULT_ACTIVATION{{\"...\"}}")
    else:
        formats_, default = _strings(formats_.group(1)), default.group(1)
        if formats_ != spec["activation_formats"] or default != spec["default_activation"]:
            out.append(f"{where}: activation formats {formats_} default {default!r}, the "
                       f"contract {spec['activation_formats']} default {spec['default_activation']!r}")

    parse = _body(cpp, f"{fmt}::parse(") or ""
    if not parse:
        out.append(f"{where}: {fmt}::parse not found")
    for name, default in re.findall(r'getString\(\s*"(\w+)"\s*,\s*"([^"]*)"\s*\)', parse):
        a = next((a for a in attrs if a["name"] == name), None)
        if a is None:
            out.append(f"{where}: reads field {name!r}, which the contract does not define for {op_type}")
        elif a["default"] != default:
            out.append(f"{where}: field {name!r} defaults to {default!r}, the contract to {a['default']!r}")

    common_attrs = {"activation_format", "family", "has_bias", "name", "n", "k"}
    for a in attrs:
        if a["values"] is None or a["name"] in common_attrs or a["values"] == [0, 1]:
            continue
        literals = set(_strings(cpp)) if a["type"] == "string" else set(re.findall(r"\b\d+\b", parse))
        missing = [v for v in a["values"] if str(v) not in literals]
        if missing:
            out.append(f"{where}: field {a['name']!r}: the contract allows {a['values']}, the source never "
                       f"names {missing}")

    version = re.search(r'kPLUGIN_VERSION\{"(\w+)"\}', struct)
    if version is None or version.group(1) != str(spec["version"]):
        out.append(f"{where}: plugin version {version.group(1) if version else None!r}, the contract's "
                   f"{op_type} version is {spec['version']}")
    return out


# What the templates must do for the field list to be the only one (regex over their source).
_DERIVED = {
    "FieldReader": r"FieldReader const reader\(fc, \*fieldNames\(\)\)",
    "fieldNames()": r"static FieldNames const kFIELDS\{[^;]*visitFields\(",
    "writeFields()": r"void writeFields\(FieldWriter& writer\) const override\s*\{\s*visitFields\(",
    "the activation formats": r"parseCommonAttributes\(\s*reader, Format::kACTIVATION_FORMATS, "
                              r"Format::kDEFAULT_ACTIVATION\)",
}


def _template_drift(templates: dict[str, str]) -> list[str]:
    out = []
    for template, src in templates.items():
        for what, pattern in _DERIVED.items():
            if not re.search(pattern, src):
                out.append(f"{template}: {what} no longer derives from visitFields (expected /{pattern}/)")
    return out


def drift(c: dict, plugins: Path) -> list[str]:
    """Every disagreement between the contract dict ``c`` and the plugin sources under ``plugins``."""
    plugins = Path(plugins)
    base_h = (plugins / "common" / "pluginBase.h").read_text()
    grouped_h = (plugins / "moeProj" / "GroupedProjectionPlugin.h").read_text()
    templates = {"DenseProjPlugin": _body((plugins / "common" / "projectionPlugin.h").read_text(),
                                          "class DenseProjPlugin") or "",
                 "GroupedProjPlugin": _body(grouped_h, "class GroupedProjPlugin") or ""}
    helpers = {name: _after_brace(_body(src, f"void {name}(")) for src, name in (
        (base_h, "visitHeadFields"), (base_h, "visitTailFields"), (grouped_h, "visitRoutingFields"))}
    formats = _formats(plugins)
    library = (plugins / "common" / "pluginLibrary.cpp").read_text()
    out = _template_drift(templates)
    for op_type, spec in c["ops"].items():
        out += _op_drift(c, op_type, spec, plugins, formats, helpers, templates, library)

    common_h = (plugins / "common" / "pluginCommon.h").read_text()
    ns = re.search(r'kPLUGIN_NAMESPACE\{"(\w+)"\}', common_h)
    if ns is None or ns.group(1) != c["domain"]:
        out.append(f"plugins/common/pluginCommon.h: namespace {ns.group(1) if ns else None!r}, the "
                   f"contract's domain {c['domain']!r}")

    base = (plugins / "common" / "pluginBase.cpp").read_text()
    fam = re.search(r"kFAMILIES\[\]\s*=\s*\{([^}]*)\}", base)
    if fam is None or _strings(fam.group(1)) != c["families"]:
        out.append(f"plugins/common/pluginBase.cpp: kFAMILIES {_strings(fam.group(1)) if fam else None}, "
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
