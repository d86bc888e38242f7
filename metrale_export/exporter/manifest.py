"""``manifest.json`` of an export: the model, the formats (requested, and the checkpoint's declared
format as its reader's ``describe()`` gives it), the layers, every metrale op, the graph's inputs and
outputs, what the row-invariance promise covers and what it leaves to TensorRT (``invariance``),
and the hash of every file.

Invariants: deterministic (no timestamps, sorted keys), so identical exports have identical
manifests; ``ops`` lists each metrale node with its attributes as written in the graph.
"""

from __future__ import annotations

import dataclasses

import hashlib
from collections import Counter
from pathlib import Path

import onnx

from .. import onnx_nodes
from ..invariance import audit
from .projection_source import ProjectionSource
from .quant_options import manifest_entry
from .writer import sha256_file

MANIFEST_NAME = "manifest.json"
# Bump when a reader of an older manifest would misread this one (session.read_manifest refuses
# other versions).
FORMAT_VERSION = 1


ROW_INVARIANCE_SCOPE = ("engines built with --lowering plugin and a fixed --activation-quantization: "
                        "the outputs listed under covers; the ops under left_to_tensorrt are not covered")


def metrale_ops(graph: onnx.GraphProto) -> list[dict]:
    """Every metrale node of ``graph``: its op type and attributes as written (``onnx_nodes``)."""
    return [{"op_type": n.op_type, **onnx_nodes.attributes(n)} for _, n in onnx_nodes.metrale_nodes(graph)]


def op_counts(ops: list[dict]) -> dict[str, int]:
    """``op_type/family/activation_format`` -> count (non-projection ops have no activation format)."""
    counts = Counter("/".join(str(o[k]) for k in ("op_type", "family", "activation_format") if k in o) for o in ops)
    return dict(sorted(counts.items()))


def _value_info(v: onnx.ValueInfoProto) -> dict:
    t = v.type.tensor_type
    dims = [d.dim_param or d.dim_value for d in t.shape.dim]
    return {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name, "shape": dims}


def weight_quantization(req, source: ProjectionSource | None = None) -> dict:
    """The manifest's ``weight_quantization``: the request (quant_options.manifest_entry: the fields
    that apply to its format) and the checkpoint's declared format. ``session.request_from_manifest``
    inverts it."""
    return {**manifest_entry(req), "declared": source.describe() if source is not None else None}


def mtp_entry(proto: onnx.ModelProto) -> dict:
    """The manifest's ``mtp``: the MTP head's graph (``layers/mtp.py``), its ops and its interface."""
    from .layers.mtp import HIDDEN_STATE, ONNX_NAME

    ops = metrale_ops(proto.graph)
    return {
        "onnx": ONNX_NAME,
        "hidden_state": HIDDEN_STATE,  # the main graph's output the head takes as its input
        "op_counts": op_counts(ops),
        "ops": ops,
        "inputs": [_value_info(v) for v in proto.graph.input],
        "outputs": [_value_info(v) for v in proto.graph.output],
    }


def _activation_scales(source: ProjectionSource | None) -> dict:
    """The manifest's ``activation_scales`` entry, or nothing (dynamic scales)."""
    scales = source.activation_scales() if source is not None else None
    return {} if scales is None else {"activation_scales": scales}


def _without_unused_expert_form(req, counts: dict):
    """``req`` with ``moe_experts`` at its default where the model has no experts (no ``/moe/`` op):
    the expert form then changes nothing in the graph, so it must not change the manifest either
    (the main job asks for dense experts when TensorRT-RTX builds, a plain export keeps the default;
    both must give the same bytes)."""
    if any("/moe/" in k for k in counts):
        return req
    return dataclasses.replace(req, moe_experts=type(req)().moe_experts)


def _fusion(model, source: ProjectionSource | None) -> dict:
    """The manifest's ``fusion`` entry: the groups the request fuses that stayed one op per part,
    each with its reason (exporter/fusion.py), or nothing."""
    from .fusion import kept_apart

    apart = kept_apart(model, source) if source is not None else {}
    return {"fusion": {"kept_apart": dict(sorted(apart.items()))}} if apart else {}


def build_manifest(ckpt, cfg, model, options, out_dir: Path, proto: onnx.ModelProto,
                   source: ProjectionSource | None = None,
                   mtp_proto: onnx.ModelProto | None = None) -> dict:
    """``source``: the projection source the export read; a declared-format source's ``describe()``
    goes under ``weight_quantization.declared`` (None for a float checkpoint). ``mtp_proto``: the
    MTP head's graph, described under ``mtp`` (absent without a head: those manifests keep their bytes)."""
    from .. import __version__

    ops = metrale_ops(proto.graph)
    config_hash = hashlib.sha256((ckpt.root / "config.json").read_bytes()).hexdigest()
    req = _without_unused_expert_form(options.request, op_counts(ops))
    return {
        "format_version": FORMAT_VERSION,
        "producer": f"metrale-export {__version__}",
        "model": {
            "architecture": cfg.architecture,
            "checkpoint": str(Path(ckpt.root).name),
            "checkpoint_path": str(Path(options.model_path).resolve()) if options.model_path else None,
            "config_sha256": config_hash,
            "num_hidden_layers": cfg.num_hidden_layers,
            "hidden_size": cfg.hidden_size,
            "vocab_size": cfg.vocab_size,
            "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": cfg.head_dim,
            "max_position_embeddings": cfg.max_position_embeddings,
        },
        "weight_quantization": weight_quantization(req, source),
        # Only with --activation-scales static (dynamic-scale manifests keep their bytes).
        **_activation_scales(source),
        "dtype": options.dtype,
        "layers": model.layer_ids,
        "op_counts": op_counts(ops),
        "ops": ops,
        # What a plugin-lowered engine with a fixed format promises, and what it leaves to TensorRT.
        "row_invariance": {"applies_to": ROW_INVARIANCE_SCOPE, **audit(proto.graph)},
        "inputs": [_value_info(v) for v in proto.graph.input],
        "outputs": [_value_info(v) for v in proto.graph.output],
        **({"mtp": mtp_entry(mtp_proto)} if mtp_proto is not None else {}),
        # Only where a fused group stayed apart (other manifests keep their bytes).
        **_fusion(model, source),
        "files": {p.name: sha256_file(p) for p in sorted(out_dir.iterdir()) if p.is_file()},
    }
