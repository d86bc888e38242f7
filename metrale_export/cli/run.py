"""``metrale-export MODEL``: the main job. Export, verify in ONNX Runtime against PyTorch, and build
one engine per row-count profile when a TensorRT backend is installed; say plainly what was skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..engines import backends
from ..engines.build import BuildOptions, build_engines
from ..engines.policy import PolicyError, parse_policy
from ..engines.profiles import DEFAULT_MAX_CONTEXT, DEFAULT_PROFILES, ProfileError, parse_profiles
from . import options as opt
from .compare import run_compare
from .export import run_export


@click.command("run")
@opt.model_argument
@opt.output_option
@opt.quantization_options
@click.option("--profiles", default=DEFAULT_PROFILES, show_default=True,
              help="Row-count profiles, one engine each (see 'metrale-export build --help').")
@click.option("--activation-quantization", "policy", default="declared", show_default=True,
              help="adaptive | declared | bf16 | fp8 | nvfp4 | per family, e.g. ffn=fp8,attn=bf16.")
@click.option("--plugins", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The metrale TensorRT plugin library (libmetrale_plugins.so).")
@click.option("--skip-compare", is_flag=True, help="Do not verify the export against PyTorch.")
@click.option("--skip-engines", is_flag=True, help="Do not build engines even if TensorRT is installed.")
@opt.force_option
@opt.quiet_option
@opt.json_option
@click.pass_context
def command(ctx, model, output, profiles, policy, plugins, skip_compare, skip_engines, force, quiet,
            as_json, **_):
    """The main job: export MODEL to ONNX with metrale ops, verify it, and build engines.

    MODEL is a .safetensors file with config.json beside it, a checkpoint directory, or a
    model.safetensors.index.json. Output goes to DIR (default: MODEL's name + '.metrale'):
    model.onnx, manifest.json, and engines/ when a TensorRT backend is installed.
    """
    try:
        profile_set = parse_profiles(profiles)
    except ProfileError as e:
        raise click.BadParameter(str(e), param_hint="--profiles") from e
    try:
        policy_obj = parse_policy(policy)
    except PolicyError as e:
        raise click.BadParameter(str(e), param_hint="--activation-quantization") from e
    say = (lambda msg: None) if (quiet or as_json) else (lambda msg: click.echo(msg, err=True))
    out = output or opt.default_output(model)
    summary: dict = {"output": str(out), "steps": {}}

    result = run_export(ctx.params, out, force, quiet or as_json)
    counts = ", ".join(f"{v} {k}" for k, v in result.manifest["op_counts"].items()) or "no metrale ops"
    say(f"[1/3] exported {model} -> {out}/model.onnx in {result.seconds:.1f} s ({counts})")
    summary["steps"]["export"] = {"seconds": round(result.seconds, 2), "op_counts": result.manifest["op_counts"]}

    if skip_compare:
        say("[2/3] comparison skipped (--skip-compare)")
        summary["steps"]["compare"] = "skipped: --skip-compare"
    else:
        report = run_compare(out, None, None, quiet=True, as_json=False)
        worst = max(r.rel_error for r in report.rows)
        say(f"[2/3] ONNX Runtime (reference ops) matches PyTorch: worst relative error {worst:.2e} "
            f"over {len(report.rows)} outputs (prefill and decode)")
        summary["steps"]["compare"] = {"ok": report.ok, "worst_rel_error": worst}

    found = {k: v for k, v in backends.available().items() if v}
    if skip_engines:
        say("[3/3] engines skipped (--skip-engines)")
        summary["steps"]["engines"] = "skipped: --skip-engines"
    elif not found:
        msg = (f"[3/3] engines NOT built: no TensorRT backend is installed. Install "
               f"`{backends.INSTALL['tensorrt']}` (GPU machines) or `{backends.INSTALL['tensorrt-rtx']}`, "
               f"then run: metrale-export build {out} --profiles {profiles}")
        say(msg)
        summary["steps"]["engines"] = "skipped: no TensorRT backend installed"
    else:
        max_context = min(DEFAULT_MAX_CONTEXT, result.manifest["model"]["max_position_embeddings"])
        options = BuildOptions(profiles=profile_set, policy=policy_obj, max_context=max_context,
                               plugins=None if plugins is None else Path(plugins))
        manifest = build_engines(out, None, options, None)
        promise = manifest["row_invariance"]
        say(f"[3/3] built {len(manifest['engines'])} engine(s) with {manifest['backend']['name']} "
            f"{manifest['backend']['version']} (lowering {manifest['lowering']}); row invariance "
            f"{'promised' if promise['promised'] else 'NOT promised'}: {promise['reason']}")
        summary["steps"]["engines"] = {"count": len(manifest["engines"]), "backend": manifest["backend"]}
    if as_json:
        click.echo(json.dumps(summary, indent=2))
