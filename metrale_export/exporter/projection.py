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

from ..ops import torch_ops  # noqa: F401  (registers torch.ops.metrale.*)

OP_TYPES = {"w4a16": "W4A16Proj", "w8a8": "W8A8Proj", "w4a4": "W4A4Proj"}
DEFAULT_ACTIVATION = {"w4a16": "bf16", "w8a8": "fp8", "w4a4": "nvfp4"}
FAMILIES = ("attn", "ffn", "gdn", "moe", "head")


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

    @property
    def op_type(self) -> str | None:
        return OP_TYPES.get(self.kind)

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

    def _opt(self, key: str):
        return getattr(self, key) if key in self.spec.tensors else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.spec
        lead = x.shape[:-1]
        x2 = x.reshape(-1, s.k)
        if s.kind == "none":
            y = torch.nn.functional.linear(x2, self.weight, self._opt("bias"))
        elif s.kind == "w4a16":
            y = torch.ops.metrale.w4a16_proj(
                x2, self.weight, self.weight_scale, self._opt("zero_point"), self._opt("bias"),
                s.n, s.k, int(s.attrs["group_size"]), str(s.attrs["activation_format"]), s.family, s.name)
        elif s.kind == "w8a8":
            y = torch.ops.metrale.w8a8_proj(
                x2, self.weight, self.weight_scale, self._opt("bias"), s.n, s.k,
                str(s.attrs["weight_scale_granularity"]), str(s.attrs["activation_format"]),
                str(s.attrs["activation_scale_granularity"]), s.family, s.name)
        elif s.kind == "w4a4":
            y = torch.ops.metrale.w4a4_proj(
                x2, self.weight, self.weight_scale, self.weight_global_scale,
                self._opt("input_scale"), self._opt("bias"), s.n, s.k,
                str(s.attrs["activation_format"]), s.family, s.name)
        else:  # pragma: no cover - specs are built by this package
            raise ValueError(f"{s.name}: unknown projection kind {s.kind!r}")
        return y.reshape(*lead, s.n)
