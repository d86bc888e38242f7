"""The state tensors a decoder layer carries between steps (KV cache, GDN conv and recurrent states)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StateSpec:
    """One state tensor of a layer: graph input ``{name}.{i}``, output ``{output}.{i}``.

    ``shape`` holds ints and the dynamic axes ``"batch"`` and ``"past"``; ``dtype`` None means the
    model's dtype."""

    name: str
    output: str
    shape: tuple[int | str, ...]
    dtype: torch.dtype | None = None

    def example(self, batch: int, past: int, dtype: torch.dtype, device) -> torch.Tensor:
        sizes = {"batch": batch, "past": past}
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in self.shape)
        return torch.zeros(shape, dtype=self.dtype or dtype, device=device)
