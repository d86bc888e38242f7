"""``metrale-export MODEL``: the main job (metrale_export.pipeline). Only option parsing and
printing here: export, verify in ONNX Runtime against PyTorch, and build one engine per row-count
profile when a TensorRT backend is installed.
"""

from __future__ import annotations

import json

import click
from click.core import ParameterSource

from . import options as opt
from .build import engine_progress
from .export import export_options
from .streams import library_output_to_stderr


def reference_dtypes() -> list[str]:
    """The --dtype names the ONNX Runtime reference (step 2) runs: the activation types of ops.ort."""
    import onnx

    from ..ops import ort

    return sorted(onnx.helper.tensor_dtype_to_np_dtype(t).name for t in ort._DT)


def preflight(model, out, profiles, dtype: str, max_context: int | None, force: bool, skip_compare: bool):
    """The checks of the options that need no export, run before it is written: the output (exists
    without --force, or is not a previous output), a --dtype the comparison cannot run, and the
    profiles against the engines' context (--max-context, else the model's, at most 4096)."""
    from ..engines.plan import resolve_max_context
    from ..engines.profiles import ProfileError, format_profiles, parse_profiles
    from ..exporter.checkpoint import Checkpoint
    from ..exporter.writer import check_replaceable

    check_replaceable(out, force)
    if not skip_compare and dtype not in (allowed := reference_dtypes()):
        raise click.BadParameter(
            f"--dtype {dtype}: the ONNX Runtime reference of step 2 (compare) runs {' or '.join(allowed)} "
            f"activations; use --dtype float32, or --skip-compare to export {dtype} without verifying it",
            param_hint="--dtype")
    ckpt = Checkpoint.open(model)
    model_max = ckpt.config.get("max_position_embeddings")
    limit = resolve_max_context(max_context, int(model_max) if model_max else None, ckpt.root / "config.json")
    if profiles is None:
        return  # the default profiles are cut to ``limit`` by the build plan
    try:
        parse_profiles(format_profiles(profiles), max_rows=limit)
    except ProfileError as e:
        raise click.BadParameter(str(e).removeprefix("--profiles: "), param_hint="--profiles") from e


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
            float_weights, skip_compare, skip_engines, force, quiet, as_json, **_):
    """The main job: export MODEL to ONNX with metrale ops, verify it, and build engines.

    MODEL is a .safetensors file with config.json beside it, a checkpoint directory, or a
    model.safetensors.index.json. Output goes to DIR (default: the checkpoint directory's name +
    '.metrale', beside it): model.onnx, manifest.json, and engines/ when a TensorRT backend is
    installed.
    """
    from ..engines.plan import BuildOptions
    from ..pipeline import (Events, JobOptions, check_backend, check_engine_targets, moe_experts_conflict,
                            plugins_conflict, run_job)
    from .progress import ByteProgress

    say = (lambda msg: None) if (quiet or as_json) else (lambda msg: click.echo(msg, err=True))
    out = output or opt.default_output(model)
    preflight(model, out, profiles, ctx.params["dtype"], max_context, force, skip_compare)
    export, session = export_options(ctx.params, force)
    build = BuildOptions(profiles=profiles, policy=policy, backend=backend, plugins=plugins,
                         max_context=max_context, rtx_targets=rtx_targets, float_weights=float_weights)
    experts_default = ctx.get_parameter_source("moe_experts") == ParameterSource.DEFAULT
    job = JobOptions(export, build, compare=not skip_compare, engines=not skip_engines,
                     moe_experts_default=experts_default)
    conflict = moe_experts_conflict(job, session.config.family)
    if conflict:
        raise click.BadParameter(conflict, param_hint="--moe-experts")
    conflict = plugins_conflict(job)
    if conflict:
        raise click.BadParameter(conflict, param_hint="--plugins")
    check_backend(job)
    check_engine_targets(job, session.source.kind_for("ffn"))  # every family but the head has this kind
    bar = ByteProgress("writing weights", enabled=not (quiet or as_json))
    events = Events(say=say, export_progress=bar, build_progress=engine_progress(say))
    try:
        with library_output_to_stderr():
            result = run_job(model, out, job, events)
    finally:
        bar.close()
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2))
    else:
        say(where_everything_is(result.output, result.steps))


def where_everything_is(out, steps: dict) -> str:
    """The job's last line: every file and directory it wrote."""
    from pathlib import Path

    out = Path(out)
    files = [p.name for p in (out / "model.onnx", out / "model.onnx.data", out / "manifest.json") if p.exists()]
    line = f"done: {out}/ holds {', '.join(files)}"
    engines = steps.get("engines")
    if isinstance(engines, dict):
        line += (f", and {engines.get('dir', out / 'engines')}/ with {engines['count']} engine(s) and "
                 "their manifest.json")
    else:
        line += f"; no engines ({engines})"
    return line
