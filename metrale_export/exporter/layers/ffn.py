"""The SwiGLU feed-forward network: down(silu(gate(x)) * up(x)), gate|up one fused op or two."""

from __future__ import annotations

import torch
from torch import nn

from .. import fusion
from ..projection import Projection
from ..projection_source import ProjectionSource


def swiglu_specs(source: ProjectionSource, prefix: str, hidden: int, inter: int, family: str,
                 fuse: bool = True) -> dict:
    """The specs of the SwiGLU at ``prefix`` (``...mlp``): ``gate_up_proj`` (or gate and up,
    fusion.py; always apart with ``fuse=False``) and ``down_proj``."""
    if fuse:
        gate_up = fusion.plan(source, prefix, fusion.GATE_UP, (inter, inter), hidden, family)
    else:
        gate_up = {p: source.spec(f"{prefix}.{p}", inter, hidden, family) for p in fusion.GATE_UP[1]}
    return {**gate_up, "down_proj": source.spec(f"{prefix}.down_proj", hidden, inter, family)}


class SwiGLU(nn.Module):
    def __init__(self, specs: dict, dtype: torch.dtype):
        super().__init__()
        for name in ("gate_up_proj", "gate_proj", "up_proj", "down_proj"):
            if name in specs:
                setattr(self, name, Projection(specs[name], dtype))
        self.gate_up_split = fusion.split_sizes(specs, fusion.GATE_UP)

    def forward(self, x):
        if self.gate_up_split is not None:
            gate, up = self.gate_up_proj(x).split(self.gate_up_split, dim=-1)
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(torch.nn.functional.silu(gate) * up)
