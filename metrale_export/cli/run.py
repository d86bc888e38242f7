"""``metrale-export MODEL``: the main job (metrale_export.pipeline). Only option parsing and
printing here: export, verify in ONNX Runtime against PyTorch, and build one engine per row-count
profile when a TensorRT backend is installed.
"""

from __future__ import annotations

import json

import click

from ..engines.build import BuildOptions
from ..pipeline import Events, JobOptions, run_job
from . import options as opt
from .build import engine_progress
from .export import export_options
from .progress import ByteProgress


@click.command("run")
@opt.model_argument
@opt.output_option
@opt.quantization_options
@opt.engine_options
@click.option("--skip-compare", is_flag=True, help="Do not verify the export against PyTorch.")
@click.option("--skip-engines", is_flag=True, help="Do not build engines even if TensorRT is installed.")
@opt.force_option
@opt.quiet_option
@opt.json_option
@click.pass_context
def command(ctx, model, output, profiles, policy, plugins, backend, max_context, rtx_targets,
            skip_compare, skip_engines, force, quiet, as_json, **_):
    """The main job: export MODEL to ONNX with metrale ops, verify it, and build engines.

    MODEL is a .safetensors file with config.json beside it, a checkpoint directory, or a
    model.safetensors.index.json. Output goes to DIR (default: MODEL's name + '.metrale'):
    model.onnx, manifest.json, and engines/ when a TensorRT backend is installed.
    """
    say = (lambda msg: None) if (quiet or as_json) else (lambda msg: click.echo(msg, err=True))
    out = output or opt.default_output(model)
    export, _ = export_options(ctx.params, force)
    build = BuildOptions(profiles=profiles, policy=policy, backend=backend, plugins=plugins,
                         max_context=max_context, rtx_targets=rtx_targets)
    bar = ByteProgress("writing weights", enabled=not (quiet or as_json))
    events = Events(say=say, export_progress=bar, build_progress=engine_progress(say))
    try:
        result = run_job(model, out, JobOptions(export, build, compare=not skip_compare,
                                                engines=not skip_engines), events)
    finally:
        bar.close()
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2))
