"""``metrale-export build``: one TensorRT engine per row-count profile (metrale_export.engines.build).

Only option parsing and printing here; the work and every decision live in ``engines``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..engines import backends
from ..engines.policy import PolicyError, parse_policy
from ..engines.profiles import DEFAULT_MAX_CONTEXT, DEFAULT_PROFILES, ProfileError, parse_profiles


# engines.build.LOWERINGS (a test keeps them equal): importing engines.build here would import onnx.
LOWERINGS = ("plugin", "qdq")


def _profiles(ctx, param, value):
    try:
        return parse_profiles(value)
    except ProfileError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from e


def _policy(ctx, param, value):
    try:
        return parse_policy(value)
    except PolicyError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from e


def _targets(ctx, param, values):
    out = []
    for v in values:
        major, dot, minor = v.partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise click.BadParameter(f"expected MAJOR.MINOR like 8.9, found {v!r}", ctx=ctx, param=param)
        out.append((int(major), int(minor)))
    return tuple(out) or (backends.DEFAULT_RTX_TARGET,)


@click.command("build")
@click.argument("source", metavar="ONNX_OR_EXPORT_DIR", type=click.Path(exists=True, path_type=Path))
@click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path),
              help="Engine directory (default: engines/ beside the ONNX file).")
@click.option("--profiles", default=DEFAULT_PROFILES, show_default=True, callback=_profiles,
              help="Row ranges of M = batch*seq, one engine each: sorted, disjoint, positive.")
@click.option("--activation-quantization", "policy", default="declared", show_default=True,
              callback=_policy,
              help="adaptive | declared | bf16 | fp8 | nvfp4 | per family: ffn=fp8,attn=bf16,...")
@click.option("--plugins", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The metrale plugin library (for --lowering plugin).")
@click.option("--backend", type=click.Choice(backends.BACKENDS),
              help="Engine builder (default: tensorrt if it imports, else tensorrt-rtx).")
@click.option("--lowering", type=click.Choice(LOWERINGS),
              help="plugin: metrale nodes as IPluginV3 layers; qdq: standard ONNX "
                   "(default: plugin with --plugins, else qdq).")
@click.option("--timing-cache", type=click.Path(dir_okay=False, path_type=Path),
              help="Shared timing cache file (tensorrt; default: timing.cache in the output).")
@click.option("--max-context", default=DEFAULT_MAX_CONTEXT, show_default=True, type=click.IntRange(1),
              help="Longest KV cache (past + seq) the engines accept.")
@click.option("--rtx-target", "rtx_targets", multiple=True, callback=_targets, metavar="MAJOR.MINOR",
              help="TensorRT-RTX compute capability to build for (repeatable; default 8.9).")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--json", "as_json", is_flag=True, help="Print the engine manifest as JSON on stdout.")
@click.option("-v", "--verbose", is_flag=True, help="Show TensorRT's warnings and errors.")
def command(source, output, profiles, policy, plugins, backend, lowering, timing_cache, max_context,
            rtx_targets, quiet, as_json, verbose):
    """Build one TensorRT engine per row-count profile of ONNX_OR_EXPORT_DIR.

    \b
    Example (no GPU needed, TensorRT-RTX for SM 8.9):
      metrale-export build out/model --backend tensorrt-rtx --lowering qdq \\
          --profiles 1,2-8,9-32,33-128,129-4096 --activation-quantization declared
    """
    from ..engines.build import BuildOptions, UsageConflict, build_engines

    options = BuildOptions(
        profiles=profiles, policy=policy, backend=backend, lowering=lowering, plugins=plugins,
        timing_cache=timing_cache, max_context=max_context, rtx_targets=rtx_targets, verbose=verbose,
    )
    say = (lambda *a, **k: None) if quiet else (lambda msg: click.echo(msg, err=True))

    def progress(event, rows, details):
        if event == "build":
            say(f"building {rows} ...")
        elif event == "built":
            say(f"  built {details['file']} ({details['bytes'] / 1e6:.1f} MB, {details['seconds']:.1f} s)")
        elif event == "skip":
            say(f"unchanged {rows}: {details['file']}")

    try:
        manifest = build_engines(source, output, options, progress)
    except UsageConflict as e:
        raise click.BadParameter(str(e), param_hint=e.param) from e
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
    promise = manifest["row_invariance"]
    say(
        f"{len(manifest['engines'])} engine(s), {manifest['backend']['name']} "
        f"{manifest['backend']['version']}, lowering {manifest['lowering']}; row invariance "
        f"{'promised' if promise['promised'] else 'not promised'}: {promise['reason']}"
    )
