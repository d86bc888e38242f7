"""CPU reference of Router (docs/ops.md, "Router"): softmax over the experts in float32, top-k with
ties to the lower expert id, optionally renormalized, the weights in the logits' dtype.

Invariants: the top-k order is descending probability, equal probabilities by ascending expert id
(a stable sort); softmax is exp(l - max) / sum, the max and the sum per row.
"""

from __future__ import annotations

import torch
from torch import Tensor


def softmax(logits: Tensor) -> Tensor:
    """exp(l - max) / sum(exp(l - max)) a row, float32."""
    l32 = logits.to(torch.float32)
    e = torch.exp(l32 - l32.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def topk_lower_id(probs: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest a row, descending, ties: the lower index first (values, indices)."""
    vals, idx = torch.sort(probs, dim=-1, descending=True, stable=True)
    return vals[..., :k], idx[..., :k]


def route(logits: Tensor, top_k: int, normalize: int) -> tuple[Tensor, Tensor]:
    """(topk_ids int32 [M, top_k], topk_weights [M, top_k] in the logits' dtype)."""
    if not 1 <= top_k <= logits.shape[-1]:
        raise ValueError(f"Router: top_k={top_k} must be in [1, {logits.shape[-1]}]")
    top, idx = topk_lower_id(softmax(logits), top_k)
    if normalize:
        top = top / top.sum(dim=-1, keepdim=True)
    return idx.to(torch.int32), top.to(logits.dtype)
