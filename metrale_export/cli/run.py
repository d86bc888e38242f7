"""``metrale-export MODEL``: the main job. Export, verify in ONNX Runtime against PyTorch, and build
one engine per row-count profile when a TensorRT backend is installed; say plainly what was skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..engines import backends
from ..engines.policy import PolicyError, parse_policy
from ..engines.profiles import DEFAULT_MAX_CONTEXT, DEFAULT_PROFILES, ProfileError, parse_profiles
from . import options as opt
from .compare import run_compare
from .export import run_export


def reference_dtypes() -> list[str]:
    """The --dtype names the ONNX Runtime reference (step 2) runs: the activation types of ops.ort."""
    import onnx

    from ..ops import ort

    return sorted(onnx.helper.tensor_dtype_to_np_dtype(t).name for t in ort._DT)


def preflight(model: Path, out: Path, profiles: str, policy: str, dtype: str, force: bool,
              skip_compare: bool):
    """Every check of the options that needs no export, run before the export is written: the
    output (exists without --force, or is not a previous output), the profiles against the model's
    context, the policy, and a --dtype the comparison cannot run. Returns (profiles, policy,
    max_context)."""
    from ..exporter.checkpoint import Checkpoint
    from ..exporter.writer import check_replaceable

    check_replaceable(Path(out), force)
    if not skip_compare and dtype not in (allowed := reference_dtypes()):
        raise click.BadParameter(
            f"--dtype {dtype}: the ONNX Runtime reference of step 2 (compare) runs {' or '.join(allowed)} "
            f"activations; use --dtype float32, or --skip-compare to export {dtype} without verifying it",
            param_hint="--dtype")
    model_max = Checkpoint.open(model).config.get("max_position_embeddings") or DEFAULT_MAX_CONTEXT
    max_context = min(DEFAULT_MAX_CONTEXT, int(model_max))
    try:
        profile_set = parse_profiles(profiles, max_rows=max_context)
    except ProfileError as e:
        raise click.BadParameter(str(e), param_hint="--profiles") from e
    try:
        policy_obj = parse_policy(policy)
    except PolicyError as e:
        raise click.BadParameter(str(e), param_hint="--activation-quantization") from e
    return profile_set, policy_obj, max_context


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
    out = output or opt.default_output(model)
    profile_set, policy_obj, max_context = preflight(model, out, profiles, policy, ctx.params["dtype"],
                                                     force, skip_compare)
    say = (lambda msg: None) if (quiet or as_json) else (lambda msg: click.echo(msg, err=True))
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
        from ..engines.build import BuildOptions, build_engines

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
