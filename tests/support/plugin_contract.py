"""What is left to check of the C++ side of the op contract once ``plugins/include/metrale/contract.h``
is generated from it (``python -m metrale_export.contract --write``; tests/contract checks the file is
current): which C++ format serves which op, and that no plugin source restates a contract value.

``drift(plugins_dir)`` returns one line per disagreement (empty: none):
- every op the contract gives a plugin (``has_plugin``) is a format's ``using Op = contract::<op>;``
  (dense) or ``using GroupedOp = contract::<op>;`` (grouped), or its base's ``ProjFormat<contract::<op>,
  contract::<grouped op>>``, or a non-projection op's fields
  ``struct <Name>Op : OpFields<contract::<op>>``, in ``plugins/*/*Plugin.h``, registered
  in ``common/pluginLibrary.cpp`` as ``ProjectionPluginCreator<DenseProjPlugin<Format>>`` (or
  ``GroupedProjPlugin``, ``OpPluginOf<Fields>``), with a ``RetiredPluginCreator`` exactly when the
  contract names a retired version (one per retired version, by its index); an op with ``has_plugin=False`` has none;
- no plugin source (comments stripped; the generated header and plugins/tests aside) spells an op
  type, an activation format or an enumerated string value as a literal: those come from the header.
What the header cannot fix at compile time, the field list a format's ``visitFields`` binds, is
checked against the header's table when each plugin is created (``FieldListCheck``, run by the
conformance harness).
"""

from __future__ import annotations

import re
from pathlib import Path

from metrale_export import contract

_FORMAT = re.compile(r"^struct (\w+(?:Format|Op))\b([^\n]*)$(.*?)^};", re.M | re.S)


def _code(text: str) -> str:
    """``text`` without C/C++ comments."""
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)


def _formats(plugins: Path) -> dict[str, tuple[str, str]]:
    """op type -> (template, format struct): the formats' ``using Op`` / ``using GroupedOp`` or
    ProjFormat base, the non-projection ops' OpFields base."""
    out = {}
    for header in sorted(plugins.glob("*/*Plugin.h")):
        for name, bases, body in _FORMAT.findall(_code(header.read_text())):
            dense = "OpPluginOf" if name.endswith("Op") else "DenseProjPlugin"
            # The base's: OpFields<contract::<op>>, ProjFormat<contract::<op>[, contract::<grouped op>]>.
            base = re.fullmatch(r"\s*:\s*(?:OpFields|ProjFormat)<contract::(\w+)(?:, contract::(\w+))?>\s*", bases)
            for alias, template, group in (("Op", dense, 1), ("GroupedOp", "GroupedProjPlugin", 2)):
                m = re.search(rf"\busing {alias} = contract::(\w+);", body)
                op = m.group(1) if m else (base.group(group) if base else None)
                if op:
                    out[op] = (template, name)
    return out


def _literals(plugins: Path) -> set[str]:
    values = set(contract.OPS) | set(contract.ACTIVATION_FORMATS) | set(contract.FAMILIES)
    for spec in contract.OPS.values():
        values |= {str(v) for a in spec.attributes if a.type == "string" and a.values for v in a.values}
    return values - {""}


def drift(plugins: Path) -> list[str]:
    """Every disagreement between the contract and the plugin sources under ``plugins``."""
    plugins = Path(plugins)
    formats = _formats(plugins)
    library = _code((plugins / "common" / "pluginLibrary.cpp").read_text())
    out = []
    for op_type, spec in contract.OPS.items():
        if not spec.has_plugin:
            if op_type in formats:
                out.append(f"{formats[op_type][1]} serves {op_type}, which the contract says has_plugin=False")
            continue
        if op_type not in formats:
            out.append(f"{op_type}: no struct *Format in plugins/*/*Plugin.h has `using Op = contract::{op_type};` "
                       f"(or GroupedOp)")
            continue
        template, fmt = formats[op_type]
        if f"ProjectionPluginCreator<{template}<{fmt}>>" not in library:
            out.append(f"plugins/common/pluginLibrary.cpp: {op_type} is not registered "
                       f"(expected a ProjectionPluginCreator<{template}<{fmt}>>)")
        # One retired creator per retired version: RetiredPluginCreator<T<F>> (index 0) or <T<F>, i>.
        pattern = rf"RetiredPluginCreator<{re.escape(template)}<{re.escape(fmt)}>(?:, *(\d+))?>"
        retired = sorted(int(i or 0) for i in re.findall(pattern, library))
        wants_retired = list(range(sum(t == op_type for t, _ in contract.OLDER_VERSIONS)))
        if retired != wants_retired:
            out.append(f"plugins/common/pluginLibrary.cpp: {op_type} "
                       f"{'lacks' if len(retired) < len(wants_retired) else 'has'} a RetiredPluginCreator<{template}<"
                       f"{fmt}>> (indices {retired}), but the contract names {len(wants_retired)} retired versions "
                       f"(indices {wants_retired})")
    literals = _literals(plugins)
    sources = {p for ext in ("h", "cpp", "cuh", "cu") for p in (*plugins.glob(f"*/*.{ext}"),
                                                                 *plugins.glob(f"include/*/*.{ext}"))}
    for source in sorted(sources):
        if source.parent.name == "tests" or source.name == "contract.h":
            continue
        for lit in sorted(set(re.findall(r'"([^"\\\n]*)"', _code(source.read_text()))) & literals):
            out.append(f"{source.relative_to(plugins.parent)}: spells the contract value \"{lit}\"; read it from "
                       f"metrale/contract.h")
    return out
