"""``metrale-export inspect DIR_OR_ONNX``: ops, formats, shapes and sizes of an export at a glance."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import click
import onnx

from ..errors import InputError
from ..exporter.manifest import metrale_ops
from . import options as opt


def summarize(path: Path) -> dict:
    onnx_path = path / "model.onnx" if path.is_dir() else path
    if not onnx_path.exists():
        raise InputError(f"{path}: no model.onnx here; expected an export directory or an .onnx file")
    try:
        model = onnx.load(str(onnx_path), load_external_data=False)
    except Exception as e:
        raise InputError(f"{onnx_path}: not a readable ONNX model ({e})") from e
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
    manifest = (path / "manifest.json") if path.is_dir() else onnx_path.parent / "manifest.json"
    if manifest.exists():
        m = json.loads(manifest.read_text())
        summary["model"] = m.get("model", {}).get("architecture")
        summary["weight_quantization"] = m.get("weight_quantization")
    return summary


@click.command("inspect")
@click.argument("path", metavar="DIR_OR_ONNX", type=click.Path(exists=True, path_type=Path))
@click.option("--ops/--no-ops", "show_ops", default=True, help="List every metrale op with its attributes.")
@opt.json_option
def command(path, show_ops, as_json):
    """Show the metrale ops (per family and activation format, with attributes), the graph's inputs
    and outputs and the weight sizes of an export directory or ONNX file."""
    s = summarize(path)
    if as_json:
        click.echo(json.dumps(s, indent=2))
        return
    click.echo(f"{s['file']}: {s['nodes']} nodes, {s['weights_bytes'] / 2**20:.2f} MiB of weights")
    if "model" in s:
        click.echo(f"model: {s['model']}, weights: {json.dumps(s['weight_quantization'])}")
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
