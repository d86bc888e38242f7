"""Looking ops up: by type, the projections, by weight-format kind (dense and grouped), the
domain's version, and whether a graph's metrale ops are older than this contract (``outdated``,
``check_model``).

Invariants:
- every answer is read from ``OPS`` at call time (tests add or replace specs in it);
- an unknown op type is a KeyError naming the known ones.
"""

from __future__ import annotations

from .numerics import DOMAIN
from .ops import OPS
from .schema import OpSpec
from .versions import OLDER_VERSIONS, VALUE_SINCE

def op_types() -> tuple[str, ...]:
    return tuple(OPS)


def op(op_type: str) -> OpSpec:
    """The spec of ``op_type``; a KeyError naming the known ops otherwise."""
    try:
        return OPS[op_type]
    except KeyError:
        raise KeyError(f"unknown op type {DOMAIN}::{op_type}; expected one of {', '.join(OPS)}") from None


def projections() -> dict[str, OpSpec]:
    """The quantized projection ops (dense and grouped), by op type."""
    return {t: o for t, o in OPS.items() if o.is_projection}


def by_kind() -> dict[str, OpSpec]:
    """Weight format kind ("w4a16", ...) -> its dense op's spec."""
    return {o.kind: o for o in projections().values() if o.grouped_of is None}


def grouped_by_kind() -> dict[str, OpSpec]:
    """Weight format kind -> its grouped-expert op's spec."""
    return {o.kind: o for o in projections().values() if o.grouped_of is not None}


def op_type_of(kind: str) -> str | None:
    """The op type a projection of ``kind`` exports as (None for "none" or an unknown kind)."""
    spec = by_kind().get(kind)
    return spec.op_type if spec else None


def domain_version() -> int:
    """The opset version of the ``metrale`` domain: the newest op version."""
    return max(o.version for o in OPS.values())


def outdated(op_type: str, imported: int | None) -> str | None:
    """Why a node of ``op_type`` in a graph importing metrale opset ``imported`` cannot be read, or
    None: a graph older than the op's version follows an older layout and must be re-exported."""
    spec = OPS.get(op_type)
    if spec is None or imported is None or imported >= spec.version:
        return None
    if all((op_type, v) in VALUE_SINCE for v in range(imported + 1, spec.version + 1)):
        return None  # only new attribute values since: the older graph reads as it is
    change = OLDER_VERSIONS.get((op_type, imported), "an older layout")
    return (f"{op_type} of metrale op contract version {imported} ({change}); this metrale-export reads "
            f"{op_type} version {spec.version}: re-export the model with this metrale-export")


def check_model(model, where: str) -> None:
    """Raise ``InputError`` when ``model`` (an onnx ModelProto, read duck-typed) holds a metrale op
    older than this contract's version of it (docs/ops.md, Older exports)."""
    from ..errors import InputError

    imported = next((int(o.version) for o in model.opset_import if o.domain == DOMAIN), None)
    for node in model.graph.node:
        if node.domain == DOMAIN:
            why = outdated(node.op_type, imported)
            if why:
                raise InputError(f"{where}: {why}")
