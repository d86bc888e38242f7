"""Options shared by several commands, as decorators (the pip-tools ``options.py`` pattern).

Torch- and onnx-free: the choices come from ``exporter.names`` and the light engine modules, so
``--help`` imports no heavy module.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..contract import MOE_LAYOUTS, STATIC_ACTIVATION_SCALE, W8A8
from ..engines import backends
from ..engines.policy import PolicyError, parse_policy
from ..engines.profiles import DEFAULT_MAX_CONTEXT, DEFAULT_PROFILES, ProfileError, parse_profiles
from ..engines.policy import ENGINE_WEIGHTS, FLOAT_WEIGHTS
from ..exporter.names import ACTIVATION_SCALE_MODES, DTYPE_NAMES, W4A16_SYMMETRIC_DEFAULT, WEIGHT_FORMATS

W8A8_SCALES = W8A8.attribute("weight_scale_granularity")
W8A8_ACT_SCALES = W8A8.attribute("activation_scale_granularity")
# The dynamic ones (the static per-tensor scale is --activation-scales static's).
W8A8_DYNAMIC_ACT_SCALES = tuple(v for v in W8A8_ACT_SCALES.values if v != STATIC_ACTIVATION_SCALE)


def _compose(*decorators):
    def apply(f):
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def _existing_model(ctx, param, value: Path) -> Path:
    """A missing MODEL is reported before the heavy imports (torch, ONNX Runtime) that opening it
    needs, in the same words as ``Checkpoint.open``."""
    from ..errors import CheckpointError

    if not value.exists():
        raise CheckpointError(f"{value}: no such file or directory")
    return value


model_argument = click.argument(
    "model", metavar="MODEL", type=click.Path(path_type=Path), callback=_existing_model,
)

quantization_options = _compose(
    click.option("--weight-quantization", "weight", type=click.Choice(("auto", *WEIGHT_FORMATS)), default="auto",
                  show_default=True,
                  help="Format of every quantized linear projection. auto: what a quantized checkpoint "
                       "declares, else w4a16; declared: only what the checkpoint declares; none: keep float."),
    click.option("--group-size", type=click.Choice(["32", "64", "128"]), default="128", show_default=True,
                 help="W4A16 group size along K."),
    click.option("--asymmetric/--symmetric", default=not W4A16_SYMMETRIC_DEFAULT, show_default=True,
                 help="W4A16 from float weights: a zero point per group (one byte each) or symmetric groups "
                      "(zero point 8, the full [-8, 7] grid)."),
    click.option("--no-scale-search", is_flag=True,
                 help="Plain round-to-nearest W4A16 group scales (clipping ranges) and NVFP4 block scales "
                      "(default: search each for the lowest squared error)."),
    click.option("--w8a8-weight-scales", type=click.Choice(W8A8_SCALES.values), default=W8A8_SCALES.default,
                 show_default=True, help="W8A8 weight scales: per output channel or 128x128 blocks."),
    click.option("--w8a8-activation-scales", type=click.Choice(W8A8_DYNAMIC_ACT_SCALES), default=W8A8_ACT_SCALES.default,
                 show_default=True, help="W8A8 dynamic activation scales: per row or per (row, 128)."),
    click.option("--activation-scales", type=click.Choice(ACTIVATION_SCALE_MODES), default=ACTIVATION_SCALE_MODES[0],
                 show_default=True,
                 help="W8A8 / W4A4 activation scales: computed per row at run time, or static per projection "
                      "from --calibration-data (W8A8: FP8 per-tensor; W4A4: the NVFP4 input_scale)."),
    click.option("--calibration-data", default=None, metavar="DATA",
                 help="With --activation-scales static: a text file (tokenized with the checkpoint's "
                      "tokenizer.json), a .ids file of token ids (one sequence a line), or random:N."),
    click.option("--quantize-lm-head", is_flag=True, help="Quantize lm_head too (default: keep it float)."),
    click.option("--moe-experts", type=click.Choice(MOE_LAYOUTS), default=MOE_LAYOUTS[0], show_default=True,
                 help="Quantized MoE experts: grouped-expert ops reading only the routed experts, or one "
                      "projection per expert run on every row (what the qdq lowering can express)."),
    click.option("--layers", default=None, metavar="SPEC",
                 help="Export only these decoder layers, e.g. '0' or '0,2' or '1-3' (debugging)."),
    click.option("--dtype", type=click.Choice(sorted(DTYPE_NAMES)), default="float32", show_default=True,
                 help="Dtype of activations and float weights in the graph (float32 runs in the "
                      "ONNX Runtime reference; the quantized ops round activations to bf16 anyway)."),
)

output_option = click.option("-o", "--output", type=click.Path(file_okay=False, path_type=Path), default=None,
                             help="Output directory (default: the checkpoint directory's name + .metrale, beside it: "
                                  "models/qwen3/model.safetensors -> models/qwen3.metrale).")
force_option = click.option("--force", is_flag=True, help="Replace the output directory if it exists.")
quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress or summary, errors only.")
json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (for scripts).")


def default_output(model: Path) -> Path:
    """<checkpoint directory>.metrale beside the checkpoint directory."""
    root = (model if model.is_dir() else model.parent).resolve()
    return root.parent / f"{root.name}.metrale"


def _profiles(ctx, param, value):
    if value is None:
        return None  # the default, cut to the engines' context by the build plan
    try:
        return parse_profiles(value)
    except ProfileError as e:
        raise click.BadParameter(str(e).removeprefix("--profiles: "), ctx=ctx, param=param) from e


def _policy(ctx, param, value):
    try:
        return parse_policy(value)
    except PolicyError as e:
        raise click.BadParameter(str(e), ctx=ctx, param=param) from e


def _plugin_library(ctx, param, value):
    """A --plugins file that is no loadable shared library is refused before any heavy import; given
    with another --lowering (``build``'s --lowering is eager, so it is parsed by now), that conflict
    is named first, whatever the file holds."""
    from ..engines.profiles import UsageConflict
    from ..preflight import PLUGINS_NEED_PLUGIN_LOWERING, check_plugin_library

    if value is not None and ctx.params.get("lowering") not in (None, "plugin"):
        raise click.BadParameter(PLUGINS_NEED_PLUGIN_LOWERING, ctx=ctx, param=param)
    if value is not None:
        try:
            check_plugin_library(value)
        except UsageConflict as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from e
    return value


def _targets(ctx, param, values):
    out = []
    for v in values:
        major, dot, minor = v.partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise click.BadParameter(f"expected MAJOR.MINOR like 8.9, found {v!r}", ctx=ctx, param=param)
        out.append((int(major), int(minor)))
    return tuple(out) or (backends.DEFAULT_RTX_TARGET,)


# The engine options of ``build`` and of the main job (engines.plan.BuildOptions).
engine_options = _compose(
    click.option("--profiles", default=None, callback=_profiles,
                 help=f"Row ranges of M = batch*seq, one engine each: sorted, disjoint, positive "
                      f"[default: {DEFAULT_PROFILES}, the last range ending at --max-context]."),
    click.option("--activation-quantization", "policy", default="declared", show_default=True,
                 callback=_policy,
                 help="adaptive | declared | bf16 | fp8 | nvfp4 | per family: ffn=fp8,attn=bf16,..."),
    click.option("--plugins", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=_plugin_library,
                 help="The metrale plugin library libmetrale_plugins.so: engines with the metrale ops as "
                      "IPluginV3 layers (the plugin lowering)."),
    click.option("--backend", type=click.Choice(backends.BACKENDS),
                 help="Engine builder (default: tensorrt if it imports, else tensorrt-rtx)."),
    click.option("--max-context", default=None, type=click.IntRange(1),
                 help=f"Longest KV cache (past + seq) the engines accept "
                      f"[default: min({DEFAULT_MAX_CONTEXT}, the model's max_position_embeddings)]."),
    click.option("--rtx-target", "rtx_targets", multiple=True, callback=_targets, metavar="MAJOR.MINOR",
                 help="TensorRT-RTX compute capability to build for (repeatable; default 8.9)."),
    click.option("--float-weights", type=click.Choice(FLOAT_WEIGHTS), default="checkpoint", show_default=True,
                 help="Engines' float weights (embedding, lm_head, router): checkpoint = bfloat16 where "
                      "the values are (the lm_head and router then run in bf16); float32 = as exported."),
    click.option("--engine-weights", type=click.Choice(ENGINE_WEIGHTS), default="shared", show_default=True,
                 help="Where the engines' weights live: shared = one weights file, bound as engine inputs "
                      "(one copy for every profile); stripped = REFIT + STRIP_PLAN engines refitted from "
                      "it; embedded = a copy in every engine."),
)
