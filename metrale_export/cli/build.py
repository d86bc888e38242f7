"""``metrale-export build``: one TensorRT engine per row-count profile (metrale_export.engines.build).

Only option parsing and printing here; the work and every decision live in ``engines``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import options as opt
from .streams import library_output_to_stderr

# engines.plan.LOWERINGS (a test keeps them equal): importing the engines' build here would import
# onnx and Polygraphy for every --help.
LOWERINGS = ("plugin", "qdq")


def expected_time(seconds: list[float]) -> str:
    """What the next engine is expected to take: the mean build time of the engines built so far in
    this run (no estimate before the first; the main job's step 3 and ``build`` both print it)."""
    if not seconds:
        return ""
    mean = sum(seconds) / len(seconds)
    shown = f"{mean:.0f} s" if mean < 120 else f"{mean / 60:.0f} min"
    return f" (expected about {shown}: the mean of the {len(seconds)} engine(s) built so far)"


def engine_progress(say):
    """The build's progress events (engines.build.Progress) as lines for ``say``; each engine's
    line says how long it is expected to take once one engine has been built."""
    built: list[float] = []

    def progress(event, rows, details):
        if event == "build":
            say(f"building {rows} ...{expected_time(built)}")
        elif event == "built":
            built.append(details["seconds"])
            say(f"  built {details['file']} ({details['bytes'] / 1e6:.1f} MB, {details['seconds']:.1f} s)")
        elif event == "skip":
            say(f"unchanged {rows}: {details['file']}")
        elif event == "remove":
            say(f"removed {details['file']} (its range is no longer asked for)")

    return progress


@click.command("build")
@click.argument("source", metavar="ONNX_OR_EXPORT_DIR", type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Engine directory (default: engines/ beside the ONNX file).")
@opt.engine_options
@click.option("--lowering", type=click.Choice(LOWERINGS), is_eager=True,  # before --plugins reads its file
              help="plugin: metrale nodes as IPluginV3 layers; qdq: standard ONNX "
                   "(default: plugin with --plugins, else qdq).")
@click.option("--timing-cache", type=click.Path(dir_okay=False, path_type=Path),
              help="Shared timing cache file (tensorrt; default: timing.cache in the output).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the engine manifest as JSON on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show TensorRT's warnings and errors.")
def command(source, output, profiles, policy, plugins, backend, lowering, timing_cache, max_context,
            rtx_targets, float_weights, engine_weights, quiet, as_json, verbose):
    """Build one TensorRT engine per row-count profile of ONNX_OR_EXPORT_DIR.

    \b
    Example (no GPU needed, TensorRT-RTX for SM 8.9):
      metrale-export build out/model --backend tensorrt-rtx --lowering qdq \\
          --profiles 1,2-8,9-32,33-128,129-4096 --activation-quantization declared
    """
    from ..engines.build import BuildOptions, UsageConflict, build_engines
    from ..engines.manifest import describe_size
    from ..errors import Interrupted

    options = BuildOptions(
        profiles=profiles, policy=policy, backend=backend, lowering=lowering, plugins=plugins,
        timing_cache=timing_cache, max_context=max_context, rtx_targets=rtx_targets,
        float_weights=float_weights, engine_weights=engine_weights, verbose=verbose,
    )
    say = (lambda *a, **k: None) if quiet else (lambda msg: click.echo(msg, err=True))

    try:
        with library_output_to_stderr():
            manifest = build_engines(source, output, options, engine_progress(say))
    except UsageConflict as e:
        raise click.BadParameter(str(e), param_hint=e.param) from e
    except KeyboardInterrupt as e:
        raise Interrupted("the engine being built was dropped, the ones finished before it are kept; "
                          "the same command builds the rest") from e
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
    promise = manifest["row_invariance"]
    say(
        f"{len(manifest['engines'])} engine(s), {manifest['backend']['name']} "
        f"{manifest['backend']['version']}, lowering {manifest['lowering']}; row invariance "
        f"{'promised' if promise['promised'] else 'not promised'}: {promise['reason']}"
    )
    say(describe_size(manifest))
