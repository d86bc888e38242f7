"""A linear projection of the model: its spec (op, shapes, attributes) and its torch module.

The module calls the matching ``metrale`` custom op (or a plain matmul when unquantized) on the
activation reshaped to ``[M, K]``, so tracing it yields exactly one ``metrale`` node per projection.
Invariants: a ``ProjSpec`` fully determines the initializers' names, shapes and dtypes before any
weight is read (export builds the graph from specs alone and streams the data afterwards).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .. import contract
from ..ops import torch_ops  # noqa: F401  (registers torch.ops.metrale.*)

# Derived from the contract: kind -> op type, kind -> the op's default activation format.
OP_TYPES = {kind: spec.op_type for kind, spec in contract.by_kind().items()}
DEFAULT_ACTIVATION = {kind: spec.default_activation for kind, spec in contract.by_kind().items()}
FAMILIES = contract.FAMILIES


@dataclass(frozen=True)
class ProjSpec:
    """What one projection exports as: ``kind`` is none|w4a16|w8a8|w4a4."""

    name: str  # checkpoint prefix, e.g. "model.layers.0.mlp.up_proj"
    kind: str
    n: int
    k: int
    family: str
    # Contract input name -> (shape, dtype), in contract order; "weight" first.
    tensors: dict[str, tuple[tuple[int, ...], torch.dtype]] = field(default_factory=dict)
    # Contract attributes other than n, k, family, name and the has_* flags (derived from tensors).
    attrs: dict[str, object] = field(default_factory=dict)
    # The checkpoint tensor(s) the weight is read from (for messages and the manifest).
    source: str = ""
    # A fused projection (exporter/fusion.py): its parts, (checkpoint prefix, rows), in row order;
    # empty for a projection the checkpoint stores as one.
    parts: tuple[tuple[str, int], ...] = ()

    @property
    def op_type(self) -> str | None:
        return contract.op_type_of(self.kind)

    def nbytes(self) -> int:
        total = 0
        for shape, dtype in self.tensors.values():
            numel = 1
            for d in shape:
                numel *= d
            total += numel * dtype.itemsize
        return total

    def check(self, tensors: dict[str, torch.Tensor]) -> None:
        """Raise ValueError unless ``tensors`` matches the spec (names, shapes, dtypes)."""
        if set(tensors) != set(self.tensors):
            raise ValueError(f"{self.name}: expected tensors {sorted(self.tensors)}, found {sorted(tensors)}")
        for key, (shape, dtype) in self.tensors.items():
            t = tensors[key]
            if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
                raise ValueError(
                    f"{self.name}.{key}: expected {list(shape)} {dtype}, found {list(t.shape)} {t.dtype}"
                )


class Projection(nn.Module):
    """y = x W^T through the metrale op of ``spec`` (buffers named after the contract inputs)."""

    def __init__(self, spec: ProjSpec, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.spec = spec
        for key, (shape, tdtype) in spec.tensors.items():
            if spec.kind == "none" and tdtype.is_floating_point:
                tdtype = dtype
            self.register_buffer(key, torch.empty(shape, dtype=tdtype))

    float_op = False  # kind "none" through metrale::float_proj (use_float_op)

    def use_float_op(self) -> None:
        """An unquantized projection of a quantized export runs the FloatProj op on a bf16 weight
        (docs/ops.md, "FloatProj"); the weight buffer becomes bf16 (filled later, rounded once)."""
        if self.spec.kind != "none":
            raise ValueError(f"{self.spec.name}: only an unquantized projection runs FloatProj, this is {self.spec.kind}")
        self.float_op = True
        self.register_buffer("weight", torch.empty(self.weight.shape, dtype=torch.bfloat16, device=self.weight.device))
        if "bias" in self.spec.tensors:
            self.register_buffer("bias", torch.empty(self.bias.shape, dtype=torch.float32, device=self.bias.device))

    def _opt(self, key: str):
        return getattr(self, key) if key in self.spec.tensors else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.spec
        lead = x.shape[:-1]
        x2 = x.reshape(-1, s.k)
        if self.float_op:
            y = torch.ops.metrale.float_proj(x2, self.weight, self._opt("bias"), s.n, s.k, s.family, s.name)
        elif s.kind == "none":
            y = torch.nn.functional.linear(x2, self.weight, self._opt("bias"))
        else:
            op = contract.by_kind().get(s.kind)
            if op is None:  # pragma: no cover - specs are built by this package
                raise ValueError(f"{s.name}: unknown projection kind {s.kind!r}")
            inputs = [self._opt(i.name) for i in op.inputs]
            y = getattr(torch.ops.metrale, op.torch_name)(x2, *inputs, *(self._attr(op, a) for a in op.torch_attributes))
        return y.reshape(*lead, s.n)

    def _attr(self, op: contract.OpSpec, name: str):
        """The value of torch argument ``name``: n, k, family and name from the spec, the others
        from ``spec.attrs`` (a contract attribute the spec lacks is an error naming both)."""
        s = self.spec
        fixed = {"n": s.n, "k": s.k, "family": s.family, "name": s.name}
        if name in fixed:
            return fixed[name]
        if name not in s.attrs:
            raise ValueError(f"{s.name}: {op.op_type} needs attribute {name!r}; the projection spec has "
                             f"{', '.join(sorted(s.attrs)) or 'none'}")
        return int(s.attrs[name]) if op.attribute(name).type == "int" else str(s.attrs[name])
