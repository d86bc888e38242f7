"""The routed experts of a MoE layer as grouped-expert ops (docs/ops.md, "Grouped-expert ops").

``GroupedSpec`` stacks the per-expert ``ProjSpec`` of one projection (``gate_up_proj``: each
expert's gate and up rows fused, exporter/fusion.py; ``gate_proj`` and ``up_proj`` unfused;
``down_proj``) along a leading expert axis; ``GroupedProjection`` calls the grouped op of the
weight format, so tracing yields one node per projection and layer, whatever the expert count.

Invariants:
- every expert's tensors are exactly what the dense export writes for that expert (the same
  source ``load``), stacked ``[E, ...]``; the per-tensor scalars (``weight_global_scale``,
  ``input_scale``) become ``[E]``;
- all experts of a projection share the weight format, shapes and attributes
  (``ExportError`` otherwise: one node has one format).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .. import contract
from ..errors import ExportError
from ..ops import torch_ops  # noqa: F401  (registers torch.ops.metrale.*)
from ..ops.moe import PER_EXPERT_SCALARS
from .projection import ProjSpec
from .projection_source import ProjectionSource

MOE_OP_TYPES = {kind: spec.op_type for kind, spec in contract.grouped_by_kind().items()}
LAYOUTS = contract.MOE_LAYOUTS  # --moe-experts


@dataclass(frozen=True)
class GroupedSpec:
    """One projection of all experts of a layer: ``name`` e.g. ``model.layers.0.mlp.experts.down_proj``."""

    name: str
    experts: tuple[ProjSpec, ...]
    top_k: int
    combine: bool  # down_proj: the weighted sum over the row's experts

    def __post_init__(self):
        first = self.experts[0]
        for e, s in enumerate(self.experts):
            same = (s.kind, s.n, s.k, s.attrs, s.tensors) == (first.kind, first.n, first.k, first.attrs, first.tensors)
            if not same:
                raise ExportError(
                    f"{s.name}: expert {e} is stored as {s.kind} {sorted(s.attrs.items())} with tensors "
                    f"{ {k: list(v[0]) for k, v in s.tensors.items()} }, expert 0 as {first.kind} "
                    f"{sorted(first.attrs.items())} with { {k: list(v[0]) for k, v in first.tensors.items()} }; "
                    "a grouped-expert node needs one format for all experts (export with --moe-experts dense)"
                )

    # what every expert shares (checked above): expert 0's
    kind = property(lambda self: self.experts[0].kind)
    n = property(lambda self: self.experts[0].n)
    k = property(lambda self: self.experts[0].k)
    family = property(lambda self: self.experts[0].family)
    attrs = property(lambda self: self.experts[0].attrs)

    @property
    def num_experts(self) -> int:
        return len(self.experts)

    @property
    def op_type(self) -> str:
        return MOE_OP_TYPES[self.kind]

    @property
    def tensors(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        e = self.num_experts
        return {key: ((e,) if key in PER_EXPERT_SCALARS else (e, *shape), dtype)
                for key, (shape, dtype) in self.experts[0].tensors.items()}

    def nbytes(self) -> int:
        return sum(s.nbytes() for s in self.experts)


class GroupedProjection(nn.Module):
    """``forward(x, topk_ids[, topk_weights])`` through the grouped op of ``spec``."""

    def __init__(self, spec: GroupedSpec, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.spec = spec
        for key, (shape, tdtype) in spec.tensors.items():
            self.register_buffer(key, torch.empty(shape, dtype=tdtype))

    def load(self, source: ProjectionSource) -> dict[str, torch.Tensor]:
        """Every expert's tensors from ``source``, stacked (one projection of one layer in memory)."""
        per = [source.load(s) for s in self.spec.experts]
        out = {}
        for key in self.spec.tensors:
            ts = [t[key].reshape(-1) if key in PER_EXPERT_SCALARS else t[key] for t in per]
            out[key] = torch.cat(ts) if key in PER_EXPERT_SCALARS else torch.stack(ts)
        return out

    def _opt(self, key: str):
        return getattr(self, key) if key in self.spec.tensors else None

    def forward(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None = None):
        s = self.spec
        common = (s.n, s.k, s.num_experts, s.top_k, int(s.combine))
        if s.kind == "w4a16":
            return torch.ops.metrale.w4a16_moe_proj(
                x, topk_ids, topk_weights, self.weight, self.weight_scale, self._opt("zero_point"),
                self._opt("bias"), *common, int(s.attrs["group_size"]), str(s.attrs["activation_format"]),
                s.family, s.name)
        if s.kind == "w8a8":
            return torch.ops.metrale.w8a8_moe_proj(
                x, topk_ids, topk_weights, self.weight, self.weight_scale, self._opt("input_scale"),
                self._opt("bias"), *common, str(s.attrs["weight_scale_granularity"]), str(s.attrs["activation_format"]),
                str(s.attrs["activation_scale_granularity"]), s.family, s.name)
        if s.kind == "w4a4":
            return torch.ops.metrale.w4a4_moe_proj(
                x, topk_ids, topk_weights, self.weight, self.weight_scale, self.weight_global_scale,
                self._opt("input_scale"), self._opt("bias"), *common, str(s.attrs["activation_format"]),
                s.family, s.name)
        raise ValueError(f"{s.name}: no grouped op for weight kind {s.kind!r}")  # pragma: no cover


class GroupedExperts(nn.Module):
    """The routed SwiGLU experts: ``down(silu(gate(x)) * up(x))`` per (row, slot), combined; gate
    and up one grouped node (``gate_up_proj``, each expert's rows ``[gate; up]``) or two."""

    def __init__(self, specs: dict[str, GroupedSpec], dtype: torch.dtype):
        super().__init__()
        for name, spec in specs.items():  # gate_up_proj or gate_proj, up_proj; down_proj
            setattr(self, name, GroupedProjection(spec, dtype))
        self.fused = "gate_up_proj" in specs

    def forward(self, x2, topk_ids, topk_weights):
        if self.fused:
            gate, up = self.gate_up_proj(x2, topk_ids).chunk(2, dim=-1)
        else:
            gate, up = self.gate_proj(x2, topk_ids), self.up_proj(x2, topk_ids)
        return self.down_proj(torch.nn.functional.silu(gate) * up, topk_ids, topk_weights)


def grouped_specs(prefix: str, experts: list[dict], top_k: int) -> dict[str, GroupedSpec] | None:
    """The grouped specs of ``{prefix}.experts`` from the per-expert SwiGLU specs (gate|up fused
    in every expert or in none), or None when the experts stay unquantized (no grouped op for
    float weights: the dense form serves them)."""
    kinds = {s.kind for e in experts for s in e.values()}
    if "none" in kinds:
        if kinds != {"none"}:
            raise ExportError(f"{prefix}.experts: experts mix unquantized and quantized projections ({sorted(kinds)}); "
                              "export with --moe-experts dense")
        return None
    return {p: GroupedSpec(f"{prefix}.experts.{p}", tuple(e[p] for e in experts), top_k, p == "down_proj")
            for p in experts[0]}
