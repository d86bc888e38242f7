"""Looking ops up: by type, the projections, by weight-format kind (dense and grouped), the
domain's version, and whether a graph's metrale ops are older than this contract (``version_check``,
``check_model``).

Invariants:
- every answer is read from ``OPS`` at call time (tests add or replace specs in it);
- an unknown op type is a KeyError naming the known ones.
"""

from __future__ import annotations

from ..errors import OK, Check, all_of
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


def version_check(op_type: str, imported: int | None) -> Check:
    """Whether a node of ``op_type`` in a graph importing metrale opset ``imported`` can be read: a
    graph older than the op's version follows an older layout and must be re-exported."""
    spec = OPS.get(op_type)
    if spec is None or imported is None or imported >= spec.version:
        return OK
    if all((op_type, v) in VALUE_SINCE for v in range(imported + 1, spec.version + 1)):
        return OK  # only new attribute values since: the older graph reads as it is
    change = OLDER_VERSIONS.get((op_type, imported), "an older layout")
    return Check.of([f"{op_type} of metrale op contract version {imported} ({change}); this metrale-export "
                     f"reads {op_type} version {spec.version}: re-export the model with this metrale-export"])


def check_model(model, where: str) -> None:
    """Raise ``InputError`` when ``model`` (an onnx ModelProto, read duck-typed) holds metrale ops
    older than this contract's version of them (docs/ops.md, Older exports): every op type at once."""
    from ..errors import InputError

    imported = next((int(o.version) for o in model.opset_import if o.domain == DOMAIN), None)
    op_types = dict.fromkeys(node.op_type for node in model.graph.node if node.domain == DOMAIN)
    check = all_of(version_check(t, imported) for t in op_types)
    if not check.ok:
        raise InputError(f"{where}: {check.message}")
