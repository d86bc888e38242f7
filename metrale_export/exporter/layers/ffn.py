"""The SwiGLU feed-forward network: down(silu(gate(x)) * up(x))."""

from __future__ import annotations

import torch
from torch import nn

from ..projection import Projection


class SwiGLU(nn.Module):
    def __init__(self, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.gate_proj = Projection(specs["gate_proj"], dtype)
        self.up_proj = Projection(specs["up_proj"], dtype)
        self.down_proj = Projection(specs["down_proj"], dtype)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
