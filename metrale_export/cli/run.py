"""``metrale-export MODEL``: the main job (metrale_export.pipeline). Only option parsing and
printing here: export, verify in ONNX Runtime against PyTorch, and build one engine per row-count
profile when a TensorRT backend is installed.
"""

from __future__ import annotations

import json

import click
from click.core import ParameterSource

from ..errors import MetraleError, all_of
from . import options as opt
from .build import engine_progress
from .export import export_options
from .streams import library_output_to_stderr


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
@click.option("-v", "--verbose", is_flag=True,
              help="Step 2's table with every layer, every end-to-end output and every op (default: the "
                   "worst layers).")
@click.pass_context
def command(ctx, model, output, profiles, policy, plugins, backend, max_context, rtx_targets,
            float_weights, engine_weights, skip_compare, skip_engines, force, quiet, as_json, verbose, **_):
    """The main job: export MODEL to ONNX with metrale ops, verify it, and build engines.

    MODEL is a .safetensors file with config.json beside it, a checkpoint directory, or a
    model.safetensors.index.json. Output goes to DIR (default: the checkpoint directory's name +
    '.metrale', beside it): model.onnx, manifest.json, and engines/ when a TensorRT backend is
    installed.
    """
    from ..engines.profiles import UsageConflict
    from ..exporter.writer import check_location, output_lock
    from ..preflight import check_job

    out = output or opt.default_output(model)
    check_location(out, force)  # an unusable location is named before the lock is taken beside it
    with output_lock(out):  # a second job into the same -o is refused at once, naming this one's pid
        try:  # torch-free and onnx-free: bad input is refused in about a second
            inputs = check_job(model, out, force=force, dtype=ctx.params["dtype"], compare=not skip_compare,
                      layers=ctx.params["layers"], profiles=profiles, max_context=max_context, backend=backend,
                      engines=not skip_engines)
        except UsageConflict as e:
            raise click.BadParameter(str(e), param_hint=e.param) from e
        _run(ctx, model, out, profiles, policy, plugins, backend, max_context, rtx_targets, float_weights,
             engine_weights, skip_compare, skip_engines, force, quiet, as_json, verbose, inputs.headers)


def _run(ctx, model, out, profiles, policy, plugins, backend, max_context, rtx_targets, float_weights,
         engine_weights, skip_compare, skip_engines, force, quiet, as_json, verbose, headers=None):
    from ..engines.plan import BuildOptions
    from ..pipeline import engine_count, run_job
    from .progress import ByteProgress

    silent = quiet or as_json
    say = (lambda msg: None) if silent else (lambda msg: click.echo(msg, err=True))
    export, session = export_options(ctx.params, force, headers)
    build = BuildOptions(profiles=profiles, policy=policy, backend=backend, plugins=plugins,
                         max_context=max_context, rtx_targets=rtx_targets, float_weights=float_weights,
                         engine_weights=engine_weights)
    job = _job_options(ctx, export, build, session, skip_compare, skip_engines)
    model_max = session.checkpoint.config.get("max_position_embeddings")
    export.engines = engine_count(job, int(model_max) if model_max else None)  # the space check counts them
    export.engine_weights = build.engine_weights
    bar = ByteProgress("writing weights", enabled=not silent)
    events = _events(say, bar, silent, verbose)
    try:
        with library_output_to_stderr():
            result = run_job(model, out, job, events)
    except MetraleError as e:  # --json still prints what ran, what it cost and what failed
        partial = getattr(e, "job_result", None)
        if as_json and partial is not None:
            click.echo(json.dumps(partial.as_json(), indent=2))
        raise
    finally:
        bar.close()
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2))
    else:
        say(where_everything_is(result.output, result.steps))


def _job_options(ctx, export, build, session, skip_compare: bool, skip_engines: bool):
    """The job's options; ``click.BadParameter`` naming every option in conflict (job_conflicts)."""
    from ..pipeline import JobOptions, job_conflicts

    experts_default = ctx.get_parameter_source("moe_experts") == ParameterSource.DEFAULT
    job = JobOptions(export, build, compare=not skip_compare, engines=not skip_engines,
                     moe_experts_default=experts_default, session=session)
    # every family but the head has the ffn's weight kind
    refused = {hint: c for hint, c in job_conflicts(job, session.config.family, session.source.kind_for("ffn")).items()
               if not c.ok}
    if refused:
        raise click.BadParameter(all_of(refused.values()).message, param_hint=" / ".join(refused))
    return job


def _events(say, bar, silent: bool, verbose: bool):
    """The job's progress and messages: none of them (but ``say``'s) when ``silent``."""
    from ..pipeline import Events
    from .compare import print_report
    from .progress import StepProgress

    table = None if silent else (lambda report: print_report(report, False, verbose, err=True))
    return Events(say=say, export_progress=bar, build_progress=engine_progress(say), compare_report=table,
                  compare_progress=StepProgress("comparing", enabled=not silent, unit="segment"))


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
