"""``metrale-export inspect PATH``: an export (ops, formats, shapes and sizes) or a checkpoint (its
model and the quantization format it declares) at a glance.

An export directory or ``.onnx`` file shows what ``summarize`` reads from the graph and the manifest,
including the checkpoint's declared format the manifest recorded; anything else is opened as a
checkpoint (a ``.safetensors`` file, a directory, an index). Both print the declared format with
``formats.describe_text``, the one line made from a reader's ``describe()``.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import click

from ..contract import DOMAIN
from ..errors import InputError
from . import options as opt


# The build the export's row-invariance summary is about (exporter/manifest.ROW_INVARIANCE_SCOPE).
PLUGIN_LOWERING = "plugin lowering, fixed --activation-quantization"


def is_export(path: Path) -> bool:
    return path.suffix == ".onnx" or (path.is_dir() and (path / "model.onnx").exists())


def engine_dir_of(path: Path) -> Path | None:
    """The engine directory ``path`` is, or holds as ``engines/`` (a manifest.json listing engines)."""
    from ..engines import manifest as engine_manifest

    if path.is_file():
        return None
    return next((d for d in (path, path / "engines")
                 if engine_manifest.is_engine_manifest(engine_manifest.read_if_any(d))), None)


def summarize_engines(engine_dir: Path) -> dict:
    """What ``metrale-export build`` left in ``engine_dir`` (its manifest, and which files are there)."""
    from ..engines import manifest as engine_manifest

    m = engine_manifest.load(engine_dir)
    backend = m.get("backend") or {}
    return {
        "dir": str(engine_dir),
        "complete": bool(m.get("complete")),
        "backend": backend,
        "lowering": m.get("lowering"),
        "activation_quantization": m.get("activation_quantization"),
        "max_context": m.get("max_context"),
        "row_invariance": {k: (m.get("row_invariance") or {}).get(k) for k in ("promised", "scope", "reason")},
        "size": engine_manifest.describe_size(m),
        "source": (m.get("source") or {}).get("path"),
        "engines": [{"rows": e["rows"], "file": e["file"], "bytes": e.get("bytes"),
                     "present": (engine_dir / e["file"]).is_file()} for e in m["engines"]],
    }


def _echo_engines(s: dict) -> None:
    b = s["backend"]
    targets = f" for SM {', '.join(b['targets'])}" if b.get("targets") else ""
    state = "complete" if s["complete"] else (
        "INCOMPLETE: a build was interrupted or failed; run metrale-export build again to finish it")
    click.echo(f"engines: {s['dir']}, {len(s['engines'])} engine(s) ({state}), {b.get('name')} "
               f"{b.get('version')}{targets}, lowering {s['lowering']}, activation quantization "
               f"{s['activation_quantization']}, max context {s['max_context']}")
    for e in s["engines"]:
        lo, hi = e["rows"]["lo"], e["rows"]["hi"]
        size = f"{e['bytes'] / 1e6:.1f} MB" if e["bytes"] is not None else "size unknown"
        missing = "" if e["present"] else ", MISSING from the directory"
        click.echo(f"  rows {lo if lo == hi else f'{lo}-{hi}'}: {e['file']} ({size}{missing})")
    click.echo(f"  {s['size']}")
    ri = s["row_invariance"]
    click.echo(f"  row invariance {'promised' if ri['promised'] else 'not promised'}: {ri['reason']}")


def _load_export_graph(path: Path):
    """The export's graph (weights left on disk), checked against the op contract and its data
    files; ``path`` is an export directory or an .onnx file."""
    import onnx

    from ..exporter.external_data import external_data_files
    from .. import contract

    onnx_path = path / "model.onnx" if path.is_dir() else path
    if not onnx_path.exists():
        raise InputError(f"{path}: no model.onnx here; expected an export directory or an .onnx file")
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:
        raise InputError(f"{onnx_path}: not a readable ONNX model ({e})") from e
    contract.check_model(model, str(onnx_path))  # an older op contract: say to re-export
    external_data_files(model, onnx_path)  # a missing or truncated weights file is refused, not summarized
    return onnx_path, model


def _initializer_bytes(model) -> dict[str, int]:
    sizes = {}
    for init in model.graph.initializer:
        ext = {e.key: e.value for e in init.external_data}
        sizes[init.name] = int(ext["length"]) if "length" in ext else len(init.raw_data)
    return sizes


def _dims(v) -> list:
    return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]


def _op_weight_bytes(graph, sizes: dict[str, int]) -> dict[str, int]:
    """Per metrale op type, the bytes of the initializers its nodes read after ``x``."""
    op_bytes = defaultdict(int)
    for node in graph.node:
        if node.domain == DOMAIN:
            op_bytes[node.op_type] += sum(sizes.get(i, 0) for i in node.input[1:])
    return dict(op_bytes)


def _ops_by_type_family_format(ops: list[dict]) -> dict[str, int]:
    """``"op_type family activation_format"`` (those an op has) -> how many metrale ops have it, sorted."""
    return dict(sorted(Counter(
        " ".join(str(o[k]) for k in ("op_type", "family", "activation_format") if k in o) for o in ops).items()))


def summarize(path: Path) -> dict:
    from ..exporter.manifest import ROW_INVARIANCE_SCOPE, metrale_ops
    from ..invariance import audit, engine_promise

    onnx_path, model = _load_export_graph(path)
    sizes = _initializer_bytes(model)
    ops = metrale_ops(model.graph)
    nodes = {n.name: n for n in model.graph.node}
    summary = {
        "file": str(onnx_path),
        "nodes": len(nodes),
        "weights_bytes": sum(sizes.values()),
        "ops_by_type_family_format": _ops_by_type_family_format(ops),
        "op_weight_bytes": _op_weight_bytes(model.graph, sizes),
        "ops": ops,
        "inputs": {v.name: _dims(v) for v in model.graph.input},
        "outputs": {v.name: _dims(v) for v in model.graph.output},
    }
    found = audit(model.graph)
    # What an engine of the plugin lowering with a fixed format would promise (the build's
    # invariance.engine_promise): true only when nothing is left to TensorRT.
    promise = engine_promise(found, True, PLUGIN_LOWERING)
    summary["row_invariance"] = {"applies_to": ROW_INVARIANCE_SCOPE, "promised": promise["promised"],
                                 "scope": promise["scope"], **found}
    manifest = (path / "manifest.json") if path.is_dir() else onnx_path.parent / "manifest.json"
    if manifest.exists():
        summary.update(_manifest_summary(json.loads(manifest.read_text())))
    return summary


def _manifest_summary(m: dict) -> dict:
    """What inspect shows of an export's manifest: the model, its weight quantization, the MTP head."""
    summary = {"model": m.get("model", {}).get("architecture"), "weight_quantization": m.get("weight_quantization")}
    if "mtp" in m:  # the MTP head's graph beside model.onnx (exporter/layers/mtp.py)
        summary["mtp"] = {k: m["mtp"][k] for k in ("onnx", "op_counts")}
        summary["mtp"]["inputs"] = {v["name"]: v["shape"] for v in m["mtp"]["inputs"]}
        summary["mtp"]["outputs"] = {v["name"]: v["shape"] for v in m["mtp"]["outputs"]}
    if "fusion" in m:  # fused groups kept one op per part (exporter/fusion.py)
        summary["fusion"] = m["fusion"]
    return summary


def summarize_checkpoint(path: Path) -> dict:
    """The model and the declared quantization format of a checkpoint (headers and configs only)."""
    from ..exporter.checkpoint import Checkpoint
    from ..exporter.formats import describe_checkpoint

    ckpt = Checkpoint.open(path)
    cfg = ckpt.config
    dtypes = Counter()
    for name in ckpt.names():
        info = ckpt.info(name)
        dtypes[str(info.dtype).removeprefix("torch.")] += info.nbytes
    return {
        "checkpoint": str(ckpt.root),
        "files": [f.name for f in ckpt.files],
        "tensors": len(ckpt.names()),
        "bytes": ckpt.total_bytes(),
        "bytes_by_dtype": dict(sorted(dtypes.items())),
        "model": {k: cfg.get(k) for k in ("architectures", "num_hidden_layers", "hidden_size",
                                          "intermediate_size", "vocab_size", "tie_word_embeddings")},
        "declared": describe_checkpoint(ckpt),
    }


def _echo_checkpoint(s: dict) -> None:
    from ..exporter.formats import describe_text

    m = s["model"]
    arch = ",".join(m["architectures"] or ["?"])
    click.echo(f"{s['checkpoint']}: checkpoint, {len(s['files'])} file(s), {s['tensors']} tensors, "
               f"{s['bytes'] / 2**20:.2f} MiB ("
               + ", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in s["bytes_by_dtype"].items()) + ")")
    click.echo(f"model: {arch}, {m['num_hidden_layers']} layers, hidden {m['hidden_size']}, "
               f"intermediate {m['intermediate_size']}, vocab {m['vocab_size']}"
               + (", tied embeddings" if m["tie_word_embeddings"] else ""))
    click.echo(f"declared format: {describe_text(s['declared'])}")


def _index_ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    runs: list[list[int]] = []
    for i in sorted(ids):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)


def per_layer_summary(values: dict[str, list]) -> str:
    """Graph inputs or outputs as one short line: the per-layer states of one name and shape
    (``past_key.0`` ... ``past_key.27``) as one entry, ``past_key.{0-27}[batch, 2, past, 64]``; the
    others as they are. The line's length then does not grow with the layers (``--json`` has all)."""
    groups: dict[tuple[str, str], list[int] | None] = {}  # (stem or name, shape) -> layer indices
    for name, shape in values.items():
        layer = re.fullmatch(r"(.+)\.(\d+)", name)
        if layer:
            groups.setdefault((layer[1], str(shape)), []).append(int(layer[2]))
        else:
            groups[(name, str(shape))] = None
    parts = []
    for (name, shape), ids in groups.items():
        if ids is None:
            parts.append(f"{name}{shape}")
        elif len(ids) == 1:
            parts.append(f"{name}.{ids[0]}{shape}")
        else:
            parts.append(f"{name}.{{{_index_ranges(ids)}}}{shape} ({len(ids)} layers)")
    return ", ".join(parts)


def _echo_export(s: dict, show_ops: bool) -> None:
    click.echo(f"{s['file']}: {s['nodes']} nodes, {s['weights_bytes'] / 2**20:.2f} MiB of weights")
    if "model" in s:
        _echo_model(s)
    click.echo("inputs:  " + per_layer_summary(s["inputs"]))
    click.echo("outputs: " + per_layer_summary(s["outputs"]))
    click.echo("metrale ops (type family activation_format: count):")
    for key, count in s["ops_by_type_family_format"].items():
        click.echo(f"  {key}: {count}")
    for op_type, b in s["op_weight_bytes"].items():
        click.echo(f"  {op_type} weights: {b / 2**20:.2f} MiB")
    if show_ops:
        for o in s["ops"]:
            attrs = " ".join(f"{k}={v}" for k, v in o.items() if k not in ("op_type", "name"))
            click.echo(f"  {o['name']}: {o['op_type']} {attrs}")
    if "mtp" in s:
        _echo_mtp(s["mtp"])
    _echo_row_invariance(s["row_invariance"], show_ops)


def _echo_model(s: dict) -> None:
    from ..exporter.formats import describe_text

    wq = dict(s["weight_quantization"] or {})
    declared = wq.pop("declared", "absent")
    fmt = wq.pop("format", None)
    if not any(o["family"] == "moe" for o in s["ops"]):
        wq.pop("moe_experts", None)  # the manifest always records it; it means something only with experts
    extra = ", ".join(f"{k}={v}" for k, v in sorted(wq.items()) if v is not None)
    click.echo(f"model: {s['model']}, weights: {fmt}" + (f" ({extra})" if extra else ""))
    if declared != "absent":  # manifests written before the declared format was recorded lack it
        click.echo(f"declared format: {describe_text(declared)}")
    _echo_kept_apart((s.get("fusion") or {}).get("kept_apart") or {})


def _echo_kept_apart(apart: dict) -> None:
    """The fused groups that stayed one op per part, with the first one's reason."""
    if apart:
        click.echo(f"kept apart: {len(apart)} fused group(s) stay one op per part ({next(iter(apart.values()))}"
                   + (", ..." if len(apart) > 1 else "") + ")")


def _echo_mtp(h: dict) -> None:
    click.echo(f"MTP head: {h['onnx']} (inspect it for its ops and weights)")
    click.echo("  inputs:  " + per_layer_summary(h["inputs"]))
    click.echo("  outputs: " + per_layer_summary(h["outputs"]))
    click.echo("  metrale ops: " + ", ".join(f"{k}: {n}" for k, n in h["op_counts"].items()))


def _echo_row_invariance(ri: dict, show_ops: bool) -> None:
    from ..invariance import describe_left

    click.echo(f"row invariance ({PLUGIN_LOWERING}): promised: {'true' if ri['promised'] else 'false'} "
               f"(scope {ri['scope']}); covers the outputs of {len(ri['covers'])} metrale ops; not covered, "
               f"left to TensorRT with tactics chosen per profile: {describe_left(ri)}")
    if show_ops:
        for e in ri["left_to_tensorrt"]:
            extra = f", weight {e['weight']}" if "weight" in e else ""
            click.echo(f"  {e['node']}: {e['op_type']} ({e['kind']}, {e['where']}{extra})")


@click.command("inspect")
@click.argument("path", metavar="PATH", type=click.Path(exists=True, path_type=Path))
@click.option("--ops/--no-ops", "show_ops", default=True, help="List every metrale op with its attributes.")
@opt.json_option
def command(path, show_ops, as_json):
    """Show an export, its engines or a checkpoint.

    \b
    An export directory or ONNX file: the metrale ops (per family and activation format, with
    attributes), the graph's inputs and outputs, the weight sizes and the checkpoint's declared
    quantization format; and, for the main job's output directory, its engines. An engine
    directory: the backend, the row-count profiles and their files, whether the build is complete
    and what row invariance it promises. A checkpoint (.safetensors file, directory or index): its
    model, tensor sizes and the quantization format it declares (bits, group size, symmetry,
    weight scales, activation format).
    """
    export = is_export(path)
    engines = engine_dir_of(path)
    if engines == path and not export:  # an engine directory by itself
        _show(summarize_engines(engines), as_json, _echo_engines)
        return
    if path.is_dir() and not export:
        _check_checkpoint_dir(path)
    if not export:
        _show(summarize_checkpoint(path), as_json, _echo_checkpoint)
        return
    s = summarize(path)
    if engines is not None:
        s["engines"] = summarize_engines(engines)
    _show(s, as_json, lambda summary: _echo_export_and_engines(summary, show_ops))


def _show(summary: dict, as_json: bool, echo) -> None:
    """``summary`` as JSON, or as text through ``echo``."""
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        echo(summary)


def _echo_export_and_engines(s: dict, show_ops: bool) -> None:
    _echo_export(s, show_ops)
    if "engines" in s:
        _echo_engines(s["engines"])


def _check_checkpoint_dir(path: Path) -> None:
    """Refuse a directory that is no checkpoint either (an export and an engine directory are not)."""
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.index.json")):
        raise InputError(f"{path}: neither an export (no model.onnx), an engine directory (no manifest.json "
                         "listing engines) nor a checkpoint (no *.safetensors or index); expected one of them")
