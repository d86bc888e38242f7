"""Options shared by several commands, as decorators (the pip-tools ``options.py`` pattern).

Torch- and onnx-free: the choices come from ``exporter.names`` and the light engine modules, so
``--help`` imports no heavy module.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..engines import backends
from ..engines.policy import PolicyError, parse_policy
from ..engines.profiles import DEFAULT_MAX_CONTEXT, DEFAULT_PROFILES, ProfileError, parse_profiles
from ..engines.policy import ENGINE_WEIGHTS, FLOAT_WEIGHTS
from ..exporter.names import ACTIVATION_SCALE_MODES, DTYPE_NAMES
from ..exporter.quant_options import BY_FIELD as QUANT_OPTIONS


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


def _request_option(field: str):
    """The Click option of one QuantRequest field, from the table (exporter/quant_options.py)."""
    o = QUANT_OPTIONS[field]
    if o.choices is None and "/" not in o.flag:  # a lone flag: the non-default value
        return click.option(o.flag, o.param, is_flag=True, help=o.help)
    if o.choices is None:  # an on/off pair
        return click.option(o.flag, o.param, default=(not o.default) if o.negated else o.default,
                            show_default=True, help=o.help)
    default = o.cli_default if o.cli_default is not None else o.default
    if o.cli_choices is not None and o.cli_default is None:
        default = str(default)  # the CLI's choices are the values' strings (--group-size)
    return click.option(o.flag, o.param, type=click.Choice(o.cli_choices or o.choices), default=default,
                        show_default=True, help=o.help)


quantization_options = _compose(
    *(_request_option(f) for f in ("weight", "group_size", "symmetric", "scale_search", "w8a8_weight_scales",
                                   "w8a8_activation_scales")),
    click.option("--activation-scales", type=click.Choice(ACTIVATION_SCALE_MODES), default=ACTIVATION_SCALE_MODES[0],
                 show_default=True,
                 help="W8A8 / W4A4 activation scales: computed per row at run time, or static per projection "
                      "from --calibration-data (W8A8: FP8 per-tensor; W4A4: the NVFP4 input_scale)."),
    click.option("--calibration-data", default=None, metavar="DATA",
                 help="With --activation-scales static: a text file (tokenized with the checkpoint's "
                      "tokenizer.json), a .ids file of token ids (one sequence a line), or random:N."),
    _request_option("quantize_lm_head"),
    _request_option("moe_experts"),
    _request_option("fuse_projections"),
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
