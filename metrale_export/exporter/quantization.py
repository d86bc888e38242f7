"""Weight quantization requested on the command line, applied to float checkpoint weights.

``FloatSource`` turns a projection of a bf16/fp16/fp32 checkpoint into a ``ProjSpec`` (before any
data is read) and, when asked, into the contract's tensors (ops/w4a16.py, w8a8.py, w4a4.py quantize). Sources
for checkpoints that are already quantized live in ``exporter/formats/`` and follow the same two
methods. Invariants: the spec alone fixes shapes and dtypes; ``load`` returns exactly the spec.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..contract import ceil_div, kernel_k_check
from ..errors import Check, CheckpointError, InputError, all_of
from ..ops import w4a4, w4a16, w8a8
from ..ops.numerics import FP8_BLOCK, NVFP4_BLOCK
from . import quant_options
from .checkpoint import Checkpoint, all_finite
from .projection import DEFAULT_ACTIVATION, ProjSpec

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_DEFAULT = {o.field: o.default for o in quant_options.OPTIONS}


@dataclass(frozen=True)
class QuantRequest:
    """The --weight-quantization family of options: one field a row of quant_options.OPTIONS, which
    gives each its default, its choices, its flag and its manifest key."""

    weight: str = _DEFAULT["weight"]
    group_size: int = _DEFAULT["group_size"]
    symmetric: bool = _DEFAULT["symmetric"]  # W4A16 from float weights: False, zero points
    w8a8_weight_scales: str = _DEFAULT["w8a8_weight_scales"]
    w8a8_activation_scales: str = _DEFAULT["w8a8_activation_scales"]
    quantize_lm_head: bool = _DEFAULT["quantize_lm_head"]
    # Search each W4A16 group's scale (clipping range) and each NVFP4 block's e4m3 scale (ops/); False:
    # round to nearest.
    scale_search: bool = _DEFAULT["scale_search"]
    # Quantized MoE experts: "grouped" (the grouped-expert ops) or "dense" (one W*Proj per expert).
    moe_experts: str = _DEFAULT["moe_experts"]
    # q|k|v and gate|up as one op each (exporter/fusion.py).
    fuse_projections: bool = _DEFAULT["fuse_projections"]

    def __post_init__(self):
        check = quant_options.check(self)
        if not check.ok:
            raise InputError(check.message)


def w4a16_check(k: int, group_size: int) -> Check:
    """Whether a float [N, K] weight can be exported as W4A16Proj at ``group_size``: the contract's
    reasons (``w4a16.shape_check``) and its CUDA kernel's (``contract.kernel_k_check``), all of them."""
    kernel = kernel_k_check("w4a16", k)
    return all_of([w4a16.shape_check(k, group_size),
                   Check.of(f"{r}; export it with another weight format" for r in kernel.reasons)])


_Layout = tuple[dict[str, tuple[tuple[int, ...], torch.dtype]], dict[str, object]]


def _none_layout(req: QuantRequest, n: int, k: int, weight_name: str) -> _Layout:
    return {"weight": ((n, k), torch.float32)}, {}


def _w4a16_layout(req: QuantRequest, n: int, k: int, weight_name: str) -> _Layout:
    check = w4a16_check(k, req.group_size)
    if not check.ok:
        raise InputError(f"{weight_name}: W4A16Proj: {check.message}")
    g = w4a16.num_groups(k, req.group_size)  # the last group may be partial (op version 2)
    tensors = {"weight": ((n, k // 2), torch.int8), "weight_scale": ((n, g), w4a16.SCALE_DTYPE)}
    if not req.symmetric:
        tensors["zero_point"] = ((n, g), torch.int8)
    return tensors, {"group_size": req.group_size}


def _w8a8_layout(req: QuantRequest, n: int, k: int, weight_name: str) -> _Layout:
    ws = (n,) if req.w8a8_weight_scales == "channel" else (ceil_div(n, FP8_BLOCK), ceil_div(k, FP8_BLOCK))
    tensors = {"weight": ((n, k), torch.int8), "weight_scale": (ws, torch.float32)}
    return tensors, {"weight_scale_granularity": req.w8a8_weight_scales,
                     "activation_scale_granularity": req.w8a8_activation_scales}


def _w4a4_layout(req: QuantRequest, n: int, k: int, weight_name: str) -> _Layout:
    if k % NVFP4_BLOCK:
        raise InputError(f"{weight_name}: NVFP4 needs K to be a multiple of 16, found K={k}")
    return {"weight": ((n, k // 2), torch.int8), "weight_scale": ((n, k // NVFP4_BLOCK), torch.int8),
            "weight_global_scale": ((1,), torch.float32)}, {}


# Weight format -> (request, n, k, weight name) -> the spec's tensors (name -> shape, dtype) and attrs.
_LAYOUTS = {"none": _none_layout, "w4a16": _w4a16_layout, "w8a8": _w8a8_layout, "w4a4": _w4a4_layout}


class FloatSource:
    """Projections of a float checkpoint, quantized on the way as ``request`` says."""

    def __init__(self, checkpoint: Checkpoint, request: QuantRequest):
        self.checkpoint = checkpoint
        self.request = request

    def kind_for(self, family: str) -> str:
        if family == "head" and not self.request.quantize_lm_head:
            return "none"
        return self.request.weight

    def describe(self) -> None:
        """Float weights declare no format."""
        return None

    def activation_scales(self) -> None:
        return None

    def spec(self, name: str, n: int, k: int, family: str, bias: bool = False,
             weight_name: str | None = None, parts: tuple[tuple[str, int], ...] = ()) -> ProjSpec:
        """Check the checkpoint's header for ``name``.weight (each part's, for a fused projection:
        their rows concatenated are its weight, fusion.py) and return the projection's spec."""
        weight_name = self._expect(name, n, k, bias, weight_name, parts)
        kind = self.kind_for(family)
        layout = _LAYOUTS.get(kind)
        if layout is None:
            raise InputError(f"unknown weight quantization {kind!r}")
        tensors, attrs = layout(self.request, n, k, weight_name)
        if bias:
            tensors["bias"] = ((n,), torch.float32)
        if kind != "none":
            attrs["activation_format"] = DEFAULT_ACTIVATION[kind]
        return ProjSpec(name=name, kind=kind, n=n, k=k, family=family, tensors=tensors,
                        attrs=attrs, source=weight_name, parts=tuple(parts))

    def _expect(self, name: str, n: int, k: int, bias: bool, weight_name: str | None,
                parts: tuple[tuple[str, int], ...]) -> str:
        """Check the headers of the weight (and bias) of ``name`` or of its parts; the weight's
        name (the parts' joined with " + ")."""
        for part, rows in parts or ((name, n),):
            self.checkpoint.expect(weight_name or f"{part}.weight", (rows, k), FLOAT_DTYPES)
            if bias:
                self.checkpoint.expect(f"{part}.bias", (rows,), FLOAT_DTYPES)
        return " + ".join(f"{p}.weight" for p, _ in parts) if parts else (weight_name or f"{name}.weight")

    def _read(self, spec: ProjSpec, suffix: str) -> torch.Tensor:
        """The float ``weight`` (``spec.source``) or ``bias`` of ``spec``, a fused spec's parts'
        concatenated, each checked to be finite."""
        names = ([f"{p}.{suffix}" for p, _ in spec.parts] if spec.parts
                 else [spec.source if suffix == "weight" else f"{spec.name}.{suffix}"])
        ts = [self.checkpoint.get(name) for name in names]
        for name, t in zip(names, ts):
            if not all_finite(t):  # sliced: no float32 copy of a large tensor
                raise CheckpointError(f"{self.checkpoint.root}: tensor {name!r} holds NaN or infinite values")
        return ts[0] if len(ts) == 1 else torch.cat(ts)

    def load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        """Read the float weight of ``spec`` and quantize it to the spec's tensors (a fused
        spec's concatenated weight as one)."""
        weight_name = spec.source
        w = self._read(spec, "weight")
        out: dict[str, torch.Tensor]
        if spec.kind == "none":
            # Kept in the stored float dtype: the model converts it once, to the export dtype (no
            # float32 round trip of a large unquantized lm_head).
            out = {"weight": w}
        elif spec.kind == "w4a16":  # converted to float32 chunk by chunk
            q = w4a16.quantize(w, int(spec.attrs["group_size"]), symmetric="zero_point" not in spec.tensors,
                               search=self.request.scale_search)
            out = {"weight": q.weight, "weight_scale": q.weight_scale}
            if q.zero_point is not None:
                out["zero_point"] = q.zero_point
        elif spec.kind == "w8a8":
            w = w.to(torch.float32)
            q = w8a8.quantize(w, str(spec.attrs["weight_scale_granularity"]))
            out = {"weight": q.weight, "weight_scale": q.weight_scale}
        else:
            q = w4a4.quantize(w.to(torch.float32), search=self.request.scale_search)
            out = {"weight": q.weight, "weight_scale": q.weight_scale,
                   "weight_global_scale": q.weight_global_scale}
        if "bias" in spec.tensors:
            out["bias"] = self._read(spec, "bias").to(torch.float32)
        if spec.kind == "none":  # the stored float dtype, so only the shape is the spec's
            want = spec.tensors["weight"][0]
            if tuple(w.shape) != tuple(want) or not w.dtype.is_floating_point:
                raise CheckpointError(f"{weight_name}: expected a float tensor of shape {list(want)}, "
                                      f"found {w.dtype} {list(w.shape)}")
        else:
            spec.check(out)
        return out
