"""``metrale-export inspect PATH``: an export (ops, formats, shapes and sizes) or a checkpoint (its
model and the quantization format it declares) at a glance.

An export directory or ``.onnx`` file shows what ``summarize`` reads from the graph and the manifest,
including the checkpoint's declared format the manifest recorded; anything else is opened as a
checkpoint (a ``.safetensors`` file, a directory, an index). Both print the declared format with
``formats.describe_text``, the one line made from a reader's ``describe()``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import click

from ..errors import InputError
from . import options as opt


def is_export(path: Path) -> bool:
    return path.suffix == ".onnx" or (path.is_dir() and (path / "model.onnx").exists())


def summarize(path: Path) -> dict:
    import onnx

    from ..exporter.manifest import ROW_INVARIANCE_SCOPE, metrale_ops
    from ..invariance import audit
    from .. import contract

    onnx_path = path / "model.onnx" if path.is_dir() else path
    if not onnx_path.exists():
        raise InputError(f"{path}: no model.onnx here; expected an export directory or an .onnx file")
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:
        raise InputError(f"{onnx_path}: not a readable ONNX model ({e})") from e
    contract.check_model(model, str(onnx_path))  # an older op contract: say to re-export
    sizes = {}
    for init in model.graph.initializer:
        ext = {e.key: e.value for e in init.external_data}
        sizes[init.name] = int(ext["length"]) if "length" in ext else len(init.raw_data)
    ops = metrale_ops(model.graph)
    op_bytes = defaultdict(int)
    nodes = {n.name: n for n in model.graph.node}
    for node in model.graph.node:
        if node.domain == "metrale":
            op_bytes[node.op_type] += sum(sizes.get(i, 0) for i in node.input[1:])
    def shape(v):
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
    summary = {
        "file": str(onnx_path),
        "nodes": len(nodes),
        "weights_bytes": sum(sizes.values()),
        "ops_by_type_family_format": dict(sorted(Counter(
            f"{o['op_type']} {o['family']} {o['activation_format']}" for o in ops).items())),
        "op_weight_bytes": dict(op_bytes),
        "ops": ops,
        "inputs": {v.name: shape(v) for v in model.graph.input},
        "outputs": {v.name: shape(v) for v in model.graph.output},
    }
    summary["row_invariance"] = {"applies_to": ROW_INVARIANCE_SCOPE, **audit(model.graph)}
    manifest = (path / "manifest.json") if path.is_dir() else onnx_path.parent / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        summary["model"] = m.get("model", {}).get("architecture")
        summary["weight_quantization"] = m.get("weight_quantization")
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


def _echo_export(s: dict, show_ops: bool) -> None:
    from ..exporter.formats import describe_text

    click.echo(f"{s['file']}: {s['nodes']} nodes, {s['weights_bytes'] / 2**20:.2f} MiB of weights")
    if "model" in s:
        wq = dict(s["weight_quantization"] or {})
        declared = wq.pop("declared", "absent")
        click.echo(f"model: {s['model']}, weights: {json.dumps(wq)}")
        if declared != "absent":  # manifests written before the declared format was recorded lack it
            click.echo(f"declared format: {describe_text(declared)}")
    click.echo("inputs:  " + ", ".join(f"{k}{v}" for k, v in s["inputs"].items()))
    click.echo("outputs: " + ", ".join(f"{k}{v}" for k, v in s["outputs"].items()))
    click.echo("metrale ops (type family activation_format: count):")
    for key, count in s["ops_by_type_family_format"].items():
        click.echo(f"  {key}: {count}")
    for op_type, b in s["op_weight_bytes"].items():
        click.echo(f"  {op_type} weights: {b / 2**20:.2f} MiB")
    if show_ops:
        for o in s["ops"]:
            attrs = " ".join(f"{k}={v}" for k, v in o.items() if k not in ("op_type", "name"))
            click.echo(f"  {o['name']}: {o['op_type']} {attrs}")
    _echo_row_invariance(s["row_invariance"], show_ops)


def _echo_row_invariance(ri: dict, show_ops: bool) -> None:
    from ..invariance import describe_left

    click.echo(f"row invariance (plugin lowering, fixed --activation-quantization): covers the outputs of "
               f"{len(ri['covers'])} metrale projections; not covered, left to TensorRT with tactics "
               f"chosen per profile: {describe_left(ri)}")
    if show_ops:
        for e in ri["left_to_tensorrt"]:
            extra = f", weight {e['weight']}" if "weight" in e else ""
            click.echo(f"  {e['node']}: {e['op_type']} ({e['kind']}, {e['where']}{extra})")


@click.command("inspect")
@click.argument("path", metavar="PATH", type=click.Path(exists=True, path_type=Path))
@click.option("--ops/--no-ops", "show_ops", default=True, help="List every metrale op with its attributes.")
@opt.json_option
def command(path, show_ops, as_json):
    """Show an export or a checkpoint.

    \b
    An export directory or ONNX file: the metrale ops (per family and activation format, with
    attributes), the graph's inputs and outputs, the weight sizes and the checkpoint's declared
    quantization format. A checkpoint (.safetensors file, directory or index): its model, tensor
    sizes and the quantization format it declares (bits, group size, symmetry, weight scales,
    activation format).
    """
    export = is_export(path)
    if path.is_dir() and not export and not any(path.glob("*.safetensors")) and not any(path.glob("*.index.json")):
        raise InputError(f"{path}: neither an export (no model.onnx) nor a checkpoint (no *.safetensors "
                         "or index); expected an export directory, an .onnx file or a checkpoint")
    s = summarize(path) if export else summarize_checkpoint(path)
    if as_json:
        click.echo(json.dumps(s, indent=2))
    elif export:
        _echo_export(s, show_ops)
    else:
        _echo_checkpoint(s)
