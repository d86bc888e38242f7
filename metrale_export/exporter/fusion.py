"""Fused projections: the projections of a layer that read the same activation, exported as one op.

q|k|v become ``self_attn.qkv_proj`` and gate|up ``mlp.gate_up_proj`` (the dense FFN's, the MoE
shared expert's and the MTP head's), the weights' rows concatenated in that order; the graph splits
the op's output (ONNX ``Split``, data movement). As in TensorRT-LLM: one launch and one read of
the activation where there were three (two). ``--no-fuse-projections`` keeps one op per checkpoint
projection. Qwen3-Next's GDN input projection is one op already (``in_proj_qkvz``, layers/gdn.py);
the routed experts keep their grouped ops (experts.py).

How a source makes a fused spec (``ProjectionSource.spec(..., parts=...)``):
- from float weights, the concatenated weight is quantized as one weight: W4A16's group scales
  and W8A8's channel scales are per row, so its codes and scales are the parts'; W4A4's global
  scale, and W8A8's 128x128 blocks where a part's rows are not a multiple of 128, are the
  concatenation's;
- from a declared format, each part is read as stored and the contract tensors are concatenated
  along N (``concat``). That needs the parts in one format (``combine``), equal per-tensor scalars
  (``weight_global_scale``, ``input_scale``: the format reads them, a few bytes, before the graph
  is made: ``check_scalars``) and weight blocks that do not straddle two parts. ModelOpt and
  llm-compressor write equal scalars for exactly these groups.
A group that cannot be one op (``Unfusable``: the reason in one line) stays one op per part.

Invariants: a fused spec names its parts in row order (``ProjSpec.parts``); its tensors are the
parts' concatenated along dim 0; it is an op like any other (row invariance is the op's); its bits
differ from the parts' ops' (docs/ops.md, "Fused projections").
"""

from __future__ import annotations

import dataclasses

import torch

from ..errors import ExportError
from .projection import Projection, ProjSpec
from .projection_source import ProjectionSource

# (fused name, its parts in row order), under the module prefix ("model.layers.0.self_attn").
QKV = ("qkv_proj", ("q_proj", "k_proj", "v_proj"))
GATE_UP = ("gate_up_proj", ("gate_proj", "up_proj"))
# Contract inputs that hold one value for the whole weight: the parts must agree on them.
SCALARS = ("weight_global_scale", "input_scale")
# Contract inputs that cover blocks of 128 rows (W8A8's block128 weight scales).
BLOCK_ROWS = 128


class Unfusable(ExportError):
    """The parts cannot be one op of this checkpoint (the message says why)."""


def plan(source: ProjectionSource, prefix: str, group: tuple, rows: tuple[int, ...], k: int,
         family: str, bias: bool = False) -> dict[str, ProjSpec]:
    """The specs of one group: ``{fused: spec}`` when the request fuses and the source can,
    else ``{part: spec}`` for each part (``rows``: each part's N, in the group's order)."""
    fused, names = group
    if source.request.fuse_projections:
        parts = tuple((f"{prefix}.{p}", n) for p, n in zip(names, rows))
        try:
            return {fused: source.spec(f"{prefix}.{fused}", sum(rows), k, family, bias=bias, parts=parts)}
        except Unfusable:
            pass
    return {p: source.spec(f"{prefix}.{p}", n, k, family, bias=bias) for p, n in zip(names, rows)}


def split_sizes(specs: dict, group: tuple) -> list[int] | None:
    """The rows of each part of ``group``'s fused spec in ``specs`` (None: the group is unfused)."""
    spec = specs.get(group[0])
    return None if spec is None else [n for _, n in spec.parts]


def _describe(s: ProjSpec) -> str:
    tensors = ", ".join(f"{k} {list(shape[1:])} {str(dt).replace('torch.', '')}" for k, (shape, dt) in s.tensors.items())
    return f"{s.kind} {sorted(s.attrs.items())} ({tensors})"


def _check_alike(name: str, specs: list[ProjSpec]) -> None:
    """``Unfusable`` unless the parts share a format and their blocks end at part boundaries."""
    first = specs[0]
    for s in specs[1:]:
        if (s.kind, s.attrs, s.family, _describe(s)) != (first.kind, first.attrs, first.family, _describe(first)):
            raise Unfusable(f"{name}: {s.name} is {_describe(s)}, {first.name} {_describe(first)}")
    blocked = [s.name for s in specs[:-1] if _block_scaled(s) and s.n % BLOCK_ROWS]
    if blocked:
        raise Unfusable(f"{name}: {blocked[0]} has {BLOCK_ROWS}-row weight blocks but not a multiple of "
                        f"{BLOCK_ROWS} rows")


def combine(name: str, specs: list[ProjSpec]) -> ProjSpec:
    """The fused spec of ``specs`` (the parts as a declared format stores them), or ``Unfusable``."""
    _check_alike(name, specs)
    first = specs[0]
    tensors = {key: (shape if key in SCALARS else (sum(s.tensors[key][0][0] for s in specs), *shape[1:]), dtype)
               for key, (shape, dtype) in first.tensors.items()}
    return dataclasses.replace(first, name=name, n=sum(s.n for s in specs), tensors=tensors,
                               source=" + ".join(s.source for s in specs), parts=tuple((s.name, s.n) for s in specs))


def _block_scaled(s: ProjSpec) -> bool:
    return s.attrs.get("weight_scale_granularity") == "block128"


def check_scalars(name: str, scalars: dict[str, dict[str, torch.Tensor]]) -> None:
    """``Unfusable`` unless every part (``scalars``: part -> contract key -> value) has the same
    per-tensor scalars."""
    parts = list(scalars)
    for key in scalars[parts[0]]:
        values = [scalars[p][key] for p in parts]
        if any(not torch.equal(v, values[0]) for v in values[1:]):
            shown = ", ".join(f"{p.rsplit('.', 1)[-1]} {float(v.reshape(-1)[0]):.9g}" for p, v in zip(parts, values))
            raise Unfusable(f"{name}: the parts have different {key} ({shown}); one op has one")


def concat(spec: ProjSpec, loaded: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The fused spec's tensors from its parts' (in ``spec.parts`` order); the scalars once, after
    checking that the parts agree (``check_scalars`` did at plan time; a file changed since is an
    error here)."""
    out = {}
    for key in spec.tensors:
        ts = [t[key] for t in loaded]
        if key in SCALARS:
            check_scalars(spec.name, {p: {key: t} for (p, _), t in zip(spec.parts, ts)})
            out[key] = ts[0]
        else:
            out[key] = torch.cat(ts)
    return out


def _candidates(module, fused: str, names: tuple[str, ...]) -> tuple[str, list[list[ProjSpec]]] | None:
    """(the group's fused name, the parts' specs of each op it could have been), or None (the group
    is fused, or ``module`` has none): one op for dense projections, one per expert for the routed
    experts' grouped gate and up (fused in all or in none)."""
    parts = [getattr(module, n, None) for n in names]
    if hasattr(module, fused) or not all(hasattr(p, "spec") for p in parts):
        return None
    specs = [p.spec for p in parts]
    name = f"{specs[0].name.rsplit('.', 1)[0]}.{fused}"
    if all(isinstance(p, Projection) for p in parts):
        return name, [specs]
    return name, [list(e) for e in zip(*(s.experts for s in specs))]  # GroupedSpec (experts.py)


def _why_apart(source: ProjectionSource, fused: str, candidates: list[list[ProjSpec]]) -> str | None:
    """The first candidate's ``Unfusable`` reason (None: every one fuses)."""
    for specs in candidates:
        name = f"{specs[0].name.rsplit('.', 1)[0]}.{fused}"
        try:
            source.spec(name, sum(s.n for s in specs), specs[0].k, specs[0].family,
                        bias="bias" in specs[0].tensors, parts=tuple((s.name, s.n) for s in specs))
        except Unfusable as e:
            return str(e)
    return None


def kept_apart(model, source: ProjectionSource) -> dict[str, str]:
    """The groups of ``model`` that the request fuses but this checkpoint could not (fused name ->
    the reason, one line): the manifest's ``fusion.kept_apart``. The plan's question asked again
    of ``source`` (headers and a few scalars), not state carried from the plan."""
    if not source.request.fuse_projections:
        return {}
    from .layers.views import with_recipes

    source = with_recipes(source, getattr(model, "recipes", {}))
    out = {}
    groups = [g for _, module in model.named_modules() for fused, names in (QKV, GATE_UP)
              if (g := _candidates(module, fused, names)) is not None]
    for name, candidates in groups:
        reason = _why_apart(source, name.rsplit(".", 1)[1], candidates)
        if reason is not None:
            out[name] = reason
    return out
