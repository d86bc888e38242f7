"""RMSNorm as Qwen3 computes it: in float32, scaled by the weight after casting back, through the
``metrale::rms_norm`` op (docs/ops.md, "RMSNorm"), so export traces one ``RMSNorm`` node per norm
and the GPU runs its row-invariant kernel. ``residual`` fuses the add before a norm (``x + h``
rounded to x's dtype, the next residual); Qwen3-Next's ``(1 + w)`` norm is ``weight_offset``, its
gated norm the op's ``gate``. ``name_ops`` gives every norm its checkpoint prefix (the node's
``name``), once the model is built.

Invariant: ``mean_square`` (used by the layers that still compute a norm in plain torch) gives every row the same bits whatever the other rows of the batch. On a
CUDA tensor in eager mode it sums in a fixed pairwise order built from elementwise additions only
(torch's GPU reductions choose their split by the tensor's shape, so ``pow(2).mean(-1)`` of a row
alone and inside a batch can differ in the last bit, measured on the H200: 5 of 33 rows at K=256).
Elsewhere (CPU, and the traced graph that export writes) it is ``pow(2).mean(-1)``, unchanged.
"""

from __future__ import annotations

import torch
from torch import nn


def row_invariant_sum(t: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis (kept, size 1) by pairwise halving: elementwise additions only, so
    each row's result depends on that row alone, on any device."""
    n = t.shape[-1]
    while n > 1:
        h = n // 2
        head = t[..., :h] + t[..., h:2 * h]
        t = torch.cat((head, t[..., 2 * h:]), dim=-1) if n % 2 else head
        n = h + n % 2
    return t


def mean_square(h: torch.Tensor) -> torch.Tensor:
    """mean(h^2) over the last axis, keepdim; row-invariant on CUDA in eager mode (see above)."""
    if h.is_cuda and not torch.compiler.is_compiling():
        return row_invariant_sum(h * h) / h.shape[-1]
    return h.pow(2).mean(-1, keepdim=True)


class RMSNorm(nn.Module):
    """forward(x [..., K], residual=None) -> y, or (y, x + residual) with a residual."""

    weight_offset = 0  # 1: scale by (1 + weight) (OffsetRMSNorm)

    def __init__(self, size: int, eps: float, dtype: torch.dtype = torch.float32):
        super().__init__()
        self.eps = eps
        self.op_name = ""  # the checkpoint prefix of the weight (name_norms)
        self.register_buffer("weight", torch.empty(size, dtype=dtype))

    def _op(self, x: torch.Tensor, residual=None, gate=None):
        # x as it is ([..., K]): no Reshape between the residual stream and the node, so the stream
        # runs through the fused norm (compare.taps follows it).
        return torch.ops.metrale.rms_norm(x, self.weight, residual, gate, self.weight.shape[0], float(self.eps),
                                          self.weight_offset, "", self.op_name)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        y, s = self._op(x, residual)
        return y if residual is None else (y, s)


def name_ops(root: nn.Module) -> None:
    """Give every module of ``root`` that calls a non-projection metrale op (an ``op_name``
    attribute: the norms, the router, the float gates) its path, which is its checkpoint prefix;
    a module named at construction keeps its name (the Attention core: its layer's ``self_attn``
    prefix, not its own path ``self_attn.core``)."""
    for name, module in root.named_modules():
        if hasattr(module, "op_name") and not module.op_name:
            module.op_name = name
