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


def _time(seconds: float) -> str:
    from ..engines.resources import describe_seconds  # torch- and onnx-free

    return describe_seconds(seconds)


def plan_line(details: dict) -> str:
    """The line before the first engine: each engine's expected build time and the total."""
    each = ", ".join(f"{e['rows'].label} {_time(e['expected_seconds'])}" for e in details["engines"])
    reused = f"; {details['reused']} unchanged" if details.get("reused") else ""
    return (f"expected build time: {_time(details['expected_seconds'])} for {len(details['engines'])} "
            f"engine(s) (rows {each}){reused}; an estimate from the lowered graph (docs/engines.md, "
            f"\"How long a build takes\")")


def built_line(details: dict) -> str:
    """The line after an engine: what it took against its estimate, and what remains."""
    line = (f"  built {details['file']} ({details['bytes'] / 1e6:.1f} MB, {_time(details['seconds'])}, "
            f"expected {_time(details['expected_seconds'])})")
    if details.get("left"):
        line += f"; {details['left']} engine(s) left, about {_time(details['remaining_seconds'])}"
    return line


def engine_progress(say):
    """The build's progress events (engines.build.Progress) as lines for ``say``: the expected time
    of every engine before the first, and after each what it took against its estimate and what
    remains (``build`` and the main job's step 3 both print them)."""

    def progress(event, rows, details):
        if event == "lower":
            say(f"lowering {details['file']} (the graph the engines are built from) ...")
        elif event == "plan":
            say(plan_line(details))
        elif event == "build":
            say(f"building {rows} ... (expected about {_time(details['expected_seconds'])})")
        elif event == "built":
            say(built_line(details))
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
