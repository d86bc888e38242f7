"""The grouped-expert ops (``W4A16MoEProj``, ``W8A8MoEProj``, ``W4A4MoEProj``, docs/ops.md
"Grouped-expert ops"): their input tables and the CPU reference.

A grouped op is the dense op of its weight format applied per (row, routed expert), with the
experts' weights stacked ``[E, ...]``; ``combine=0`` returns every routed expert's output
``[M, top_k, N]`` (gate / up), ``combine=1`` (down) takes one input row per (row, slot)
``[M, top_k, K]`` and returns ``sum over the row's slots in ascending expert id of
topk_weights * output``, in float32 from +0, rounded once to the dtype of x.

Invariants:
- per (row, slot) the reference calls exactly the dense reference (``w4a16.proj`` ...) on that
  expert's slice of the stacked tensors, so an expert computes the dense op's values;
- a row's output depends on that row, its ``topk_ids`` and ``topk_weights`` only;
- ``topk_ids`` are int32 in ``[0, E)`` and distinct within a row (``MoEInputError`` otherwise).
"""

from __future__ import annotations

import torch

from .. import contract
from . import w4a4, w4a16, w8a8

# Grouped op type -> the dense op whose arithmetic each expert follows.
DENSE_OF = {t: s.grouped_of for t, s in contract.OPS.items() if s.grouped_of is not None}
OP_TYPES = tuple(DENSE_OF)
ROUTING_INPUTS = (("topk_ids", "tensor(int32)", False), ("topk_weights", "T", True))
# Tensors stacked with a leading expert axis whose per-expert form is a scalar [1] in the dense op.
PER_EXPERT_SCALARS = ("weight_global_scale", "input_scale")


class MoEInputError(ValueError):
    """Routing inputs that break the grouped op's contract (ids out of range, repeated, shapes)."""


def expert_slice(tensors: dict[str, torch.Tensor | None], e: int) -> dict[str, torch.Tensor | None]:
    """Expert ``e``'s dense-op tensors from the stacked ones."""
    out = {}
    for name, t in tensors.items():
        if t is None:
            out[name] = None
        elif name in PER_EXPERT_SCALARS:
            out[name] = t.reshape(-1)[e:e + 1]
        else:
            out[name] = t[e]
    return out


def dense_reference(op_type: str, x: torch.Tensor, t: dict, attrs: dict) -> torch.Tensor:
    """The dense reference of the grouped op ``op_type`` on one expert's tensors ``t``."""
    dense = DENSE_OF[op_type]
    if dense == "W4A16Proj":
        return w4a16.proj(x, t["weight"], t["weight_scale"], t.get("zero_point"), t.get("bias"),
                          int(attrs["group_size"]), attrs["activation_format"])
    if dense == "W8A8Proj":
        return w8a8.proj(x, t["weight"], t["weight_scale"], t.get("bias"), attrs["weight_scale_granularity"],
                         attrs["activation_format"], attrs["activation_scale_granularity"], t.get("input_scale"))
    return w4a4.proj(x, t["weight"], t["weight_scale"], t["weight_global_scale"], t.get("input_scale"),
                     t.get("bias"), attrs["activation_format"])


def check_routing(topk_ids: torch.Tensor, num_experts: int, m: int, top_k: int, where: str = "") -> None:
    if topk_ids.dtype != torch.int32:
        raise MoEInputError(f"{where}topk_ids: expected int32, found {topk_ids.dtype}")
    if tuple(topk_ids.shape) != (m, top_k):
        raise MoEInputError(f"{where}topk_ids: expected shape [{m}, {top_k}], found {list(topk_ids.shape)}")
    if m == 0:
        return
    lo, hi = int(topk_ids.min()), int(topk_ids.max())
    if lo < 0 or hi >= num_experts:
        raise MoEInputError(f"{where}topk_ids: expert ids must lie in [0, {num_experts}), found {lo}..{hi}")
    if top_k > 1:
        s = torch.sort(topk_ids, dim=1).values
        if bool((s[:, 1:] == s[:, :-1]).any()):
            raise MoEInputError(f"{where}topk_ids: an expert id repeats within a row")


def combine(p: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, out_dtype) -> torch.Tensor:
    """``y[m] = sum over the row's slots in ascending expert id of w * p``, float32 from +0 (each
    product and sum rounded once, no fused multiply-add), then one rounding to ``out_dtype``."""
    order = torch.argsort(topk_ids.to(torch.int64), dim=1, stable=True)
    ps = torch.gather(p, 1, order[..., None].expand(p.shape)).to(torch.float32)
    ws = torch.gather(topk_weights, 1, order).to(torch.float32)
    acc = torch.zeros(p.shape[0], p.shape[2], dtype=torch.float32, device=p.device)
    for j in range(p.shape[1]):
        acc = acc + ps[:, j] * ws[:, j, None]
    return acc.to(out_dtype)


def _expert_rows(x: torch.Tensor, topk_weights: torch.Tensor | None, k: int, top_k: int, comb: bool,
                 where: str) -> torch.Tensor:
    """The [M, top_k, k] rows each routed expert runs on, after checking the shapes of ``x`` (and of
    ``topk_weights`` for combine=1)."""
    m = x.shape[0]
    if not comb:
        if x.dim() != 2 or x.shape[1] != k:
            raise MoEInputError(f"{where}x: expected [M, {k}], found {list(x.shape)}")
        return x[:, None, :].expand(m, top_k, k)
    if x.dim() != 3 or tuple(x.shape[1:]) != (top_k, k):
        raise MoEInputError(f"{where}x: expected [M, {top_k}, {k}] for combine=1, found {list(x.shape)}")
    if topk_weights is None or tuple(topk_weights.shape) != (m, top_k):
        found = None if topk_weights is None else list(topk_weights.shape)
        raise MoEInputError(f"{where}topk_weights: expected shape [{m}, {top_k}], found {found}")
    return x


def moe_proj(op_type: str, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None,
             tensors: dict[str, torch.Tensor | None], attrs: dict) -> torch.Tensor:
    """CPU reference of a grouped op. ``attrs`` holds n, k, num_experts, top_k, combine and the
    dense op's attributes."""
    n, k, e_count, top_k = (int(attrs[a]) for a in ("n", "k", "num_experts", "top_k"))
    comb = bool(int(attrs["combine"]))
    where = f"{op_type} ({attrs.get('name', '')}): " if attrs.get("name") else f"{op_type}: "
    m = x.shape[0]
    rows = _expert_rows(x, topk_weights, k, top_k, comb, where)
    check_routing(topk_ids, e_count, m, top_k, where)
    out = torch.zeros(m, top_k, n, dtype=x.dtype, device=x.device)
    ids = topk_ids.to(torch.int64)
    for e in torch.unique(ids).tolist():
        sel = ids == e
        out[sel] = dense_reference(op_type, rows[sel].contiguous(), expert_slice(tensors, e), attrs)
    if not comb:
        return out
    return combine(out, topk_ids, topk_weights, x.dtype)
