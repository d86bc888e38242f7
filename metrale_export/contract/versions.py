"""The ops' version history: what changed since each retired version (``OLDER_VERSIONS``), the
versions whose only change is a new attribute value (``VALUE_SINCE``), and what follows from them
for a spec (``compatible_version``, ``names_plugin_version``). The refusal of an older graph
(``version_check``) is contract/registry.py's, which knows the ops.

Invariants:
- keyed by (op type, version): a retired version is refused by the readers and by a plugin creator
  of its own; a value-only version reads the older graphs as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .schema import OpSpec

# What changed in an op since an older version (the refusal of an older graph says it).
# Every retired version of an op is refused by the readers and by a plugin creator of its own
# (contract.h's kRETIRED, one entry per version).
_V1_SCALES = "float32 group scales; version 2 stores them as bfloat16"
_W8A8_EXACT = "exact f16 products summed in float32; version 3 multiplies on the FP8 tensor core"
OLDER_VERSIONS = {("W4A16Proj", 1): _V1_SCALES, ("W4A16MoEProj", 1): _V1_SCALES,
                  ("W8A8Proj", 1): _W8A8_EXACT, ("W8A8Proj", 2): _W8A8_EXACT}

# Versions whose only change is a new attribute value: (op type, version) -> (attribute, value). A
# node without that value is a node of the version before, written as one (``OpSpec.node_version``),
# so graphs that do not use it keep their bytes and older plugin libraries still load them; a node
# with it carries plugin_version, and an older library refuses it by name.
STATIC_ACTIVATION_SCALE = "tensor"  # W8A8Proj's activation_scale_granularity of a calibrated scale
# (W8A8Proj's version 2 was one too; version 3 changed its arithmetic, so its nodes are all version 3.)
VALUE_SINCE = {("W8A8Proj", 2): ("activation_scale_granularity", STATIC_ACTIVATION_SCALE),
               ("W8A8MoEProj", 2): ("activation_scale_granularity", STATIC_ACTIVATION_SCALE)}


def compatible_version(spec: OpSpec) -> int | None:
    """The oldest version of ``spec`` whose nodes this version reads as they are (every change since
    is a new attribute value, ``VALUE_SINCE``), or None: the plugins register a creator under it."""
    version = spec.version
    while version > 1 and (spec.op_type, version) in VALUE_SINCE:
        version -= 1
    return version if version < spec.version else None


def names_plugin_version(spec: OpSpec, attrs: dict | None = None) -> bool:
    """Whether a node of ``spec`` (with ``attrs``; None: any node) carries the string attribute
    ``plugin_version`` (its ``node_version``): a plugin op whose version is not TensorRT's default
    "1". TensorRT's ONNX parser finds the creator by it; it is not a plugin field."""
    version = spec.version if attrs is None else spec.node_version(attrs)
    return spec.has_plugin and version > 1
