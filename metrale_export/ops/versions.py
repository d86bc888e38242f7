"""The ``metrale`` op versions (docs/ops.md) and the check that refuses graphs of an older contract.

Torch-free (engines/ reads it). Each op has its own version, as ONNX ops do: a model imports the
domain at one opset version, and an op's node follows the newest version of that op not above it.
The same number, as a string, is the TensorRT plugin version, which a node names with the
``plugin_version`` attribute when it is not "1" (TensorRT's ONNX parser reads it to find the
creator).

Invariants: a graph whose metrale opset is older than an op's current version is refused with one
line that says to re-export, never read with the old layout's tensors as if they were the new one.
"""

from __future__ import annotations

DOMAIN = "metrale"
# Version 2 of W4A16Proj: bfloat16 group scales and a partial last group (version 1: float32
# scales, group_size dividing K).
# The grouped-expert ops take their dense op's weight tensors, so W4A16MoEProj follows version 2.
OP_VERSIONS = {"W4A16Proj": 2, "W8A8Proj": 1, "W4A4Proj": 1,
               "W4A16MoEProj": 2, "W8A8MoEProj": 1, "W4A4MoEProj": 1}
DOMAIN_VERSION = max(OP_VERSIONS.values())
# The ops with a TensorRT plugin (plugins/): their nodes name the plugin version when it is not "1".
PLUGIN_OPS = ("W4A16Proj", "W8A8Proj", "W4A4Proj")
_V1_SCALES = "float32 group scales; version 2 stores them as bfloat16"
_CHANGES = {("W4A16Proj", 1): _V1_SCALES, ("W4A16MoEProj", 1): _V1_SCALES}


def plugin_version(op_type: str) -> str:
    """The TensorRT plugin version of ``op_type`` (its op version as a string)."""
    return str(OP_VERSIONS[op_type])


def names_plugin_version(op_type: str) -> bool:
    """Whether a node of ``op_type`` carries the ``plugin_version`` attribute (a plugin op whose
    version is not TensorRT's default "1")."""
    return op_type in PLUGIN_OPS and OP_VERSIONS[op_type] > 1


def domain_version(opset_import) -> int | None:
    """The metrale opset version a model (or function) imports, or None."""
    for o in opset_import:
        if o.domain == DOMAIN:
            return int(o.version)
    return None


def outdated(op_type: str, imported: int | None) -> str | None:
    """Why a node of ``op_type`` under metrale opset ``imported`` cannot be read, or None."""
    want = OP_VERSIONS.get(op_type)
    if want is None or imported is None or imported >= want:
        return None
    change = _CHANGES.get((op_type, imported), "an older layout")
    return (f"{op_type} of metrale op contract version {imported} ({change}); this metrale-export reads "
            f"{op_type} version {want}: re-export the model with this metrale-export")


def check_model(model, where: str) -> None:
    """Raise ``InputError`` when ``model`` (an onnx ModelProto) holds a metrale op older than this
    package's version of it."""
    from ..errors import InputError

    imported = domain_version(model.opset_import)
    for node in model.graph.node:
        if node.domain == DOMAIN:
            why = outdated(node.op_type, imported)
            if why:
                raise InputError(f"{where}: {why}")
