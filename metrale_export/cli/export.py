"""``metrale-export export MODEL -o DIR``: the export step alone (exporter.export).

torch is imported inside the command, not here (``--help`` stays fast).
"""

from __future__ import annotations

import json

import click

from . import options as opt
from .streams import library_output_to_stderr


def resolve_weight_format(weight: str, ckpt) -> str:
    """``auto``: declared for a checkpoint that declares a quantization format, else w4a16
    (``exporter.session.resolve_weight``)."""
    from ..exporter.session import resolve_weight

    return resolve_weight(weight, ckpt)


def export_options(ctx_params: dict, force: bool, headers: dict | None = None):
    """(ExportOptions, ModelSession) from the shared quantization options (validated against the
    model); ``export`` takes the session, and ``headers`` are the up-front checks' (check_job), so
    each safetensors header is read once."""
    from ..exporter.export import ExportOptions, parse_layers
    from ..exporter.quant_options import request_fields_from_cli
    from ..exporter.session import open_model

    session = open_model(ctx_params["model"], request_fields_from_cli(ctx_params), headers)
    layers = parse_layers(ctx_params["layers"], session.config.num_hidden_layers)
    options = ExportOptions(request=session.request, layers=layers, dtype=ctx_params["dtype"], force=force,
                            activation_scales=ctx_params.get("activation_scales", "dynamic"),
                            calibration_data=ctx_params.get("calibration_data"))
    return options, session


def run_export(params: dict, out, force: bool, quiet: bool, headers: dict | None = None):
    from ..exporter.export import export
    from .progress import ByteProgress

    options, session = export_options(params, force, headers)
    bar = ByteProgress("writing weights", enabled=not quiet)
    try:
        return export(session, out, options, progress=bar)
    finally:
        bar.close()


@click.command("export")
@opt.model_argument
@opt.output_option
@opt.quantization_options
@opt.force_option
@opt.quiet_option
@opt.json_option
@click.pass_context
def command(ctx, model, output, force, quiet, as_json, **_):
    """Export MODEL (a .safetensors file with config.json beside it, a checkpoint directory, or a
    model.safetensors.index.json) to ONNX with metrale projection ops."""
    from ..exporter.writer import check_location, output_lock
    from ..preflight import check_job

    out = output or opt.default_output(model)
    check_location(out, force)  # an unusable location is named before the lock is taken beside it
    with output_lock(out):  # torch-free checks first: bad input is refused in about a second
        inputs = check_job(model, out, force=force, dtype=ctx.params["dtype"], compare=False,
                           layers=ctx.params["layers"])
        with library_output_to_stderr():
            result = run_export(ctx.params, out, force, quiet or as_json, inputs.headers)
    if as_json:
        click.echo(json.dumps({"output": str(result.out_dir), "seconds": round(result.seconds, 2),
                               "op_counts": result.manifest["op_counts"]}, indent=2))
    elif not quiet:
        counts = ", ".join(f"{v} {k}" for k, v in result.manifest["op_counts"].items()) or "no metrale ops"
        click.echo(f"Exported {model} -> {result.out_dir} in {result.seconds:.1f} s ({counts})")
