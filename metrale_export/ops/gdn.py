"""CPU reference of the Gated DeltaNet ops (docs/ops.md, "Gated DeltaNet"): ``CausalConv1d`` (the
depthwise causal conv + SiLU with its state) and ``GatedDeltaRule`` (the l2-normalized, gated delta
rule with its float32 state), in the kernels' order of operations.

Invariants:
- Every float32 operation is one IEEE operation, rounded, in the order the CUDA kernels run it
  (``plugins/gatedDeltaNet/gdnKernel.cuh``): products and sums separately rounded (the kernels use
  ``__fmul_rn`` / ``__fadd_rn``: no fused multiply-add), sums in ascending index order from +0.
- The transcendentals (exp, log1p) are evaluated in float64 and rounded once to float32 on both
  sides; the l2 norm's square root is correctly rounded (``numerics.sqrt_rn``, as ``__fsqrt_rn``:
  torch's CPU float32 sqrt is not always, which made the rule's float32 state differ from the
  kernel's in about 1% of its elements, benchmarks/results/gdn-20261202-1131-3c726bf.md). So the
  kernels' bits are the reference's.
- Tokens are processed one at a time in order (the recurrent form): a token's result depends only
  on its own sequence's earlier tokens and the state, so any split of a sequence into calls gives
  the same bits.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .. import contract
from .numerics import sqrt_rn

F32 = torch.float32


def _exp(t: Tensor) -> Tensor:
    """float32(exp(float64(t)))."""
    return torch.exp(t.to(torch.float64)).to(F32)


def silu(a: Tensor) -> Tensor:
    """a / (1 + float32(exp(-a))) in float32."""
    return a / (1.0 + _exp(-a))


def sigmoid(b: Tensor) -> Tensor:
    """1 / (1 + float32(exp(-b))) in float32."""
    return 1.0 / (1.0 + _exp(-b))


def softplus(u: Tensor) -> Tensor:
    """float32(log1p(exp(float64(u)))), u itself above the threshold (torch's)."""
    sp = torch.log1p(torch.exp(u.to(torch.float64))).to(F32)
    return torch.where(u > contract.GDN_SOFTPLUS_THRESHOLD, u, sp)


def causal_conv1d(x: Tensor, weight: Tensor, conv_state: Tensor) -> tuple[Tensor, Tensor]:
    """x [B, S, C], weight [C, 1, K], conv_state [B, C, K-1] (all x's dtype) -> (y [B, S, C] x's
    dtype, conv_state_out [B, C, K-1]). u = cat(conv_state, x) along the tokens; y[t, c] =
    round(silu(acc)), acc = sum_j float32(w[c, j]) * float32(u[t + j, c]), j ascending from +0."""
    b, s, c = x.shape
    kernel = weight.shape[-1]
    if weight.shape != (c, 1, kernel) or conv_state.shape != (b, c, kernel - 1):
        raise ValueError(f"CausalConv1d: x {list(x.shape)}, weight {list(weight.shape)}, conv_state "
                         f"{list(conv_state.shape)}: expected [B, S, C], [C, 1, K], [B, C, K - 1]")
    u = torch.cat((conv_state.to(x.dtype).transpose(1, 2), x), dim=1)  # [B, K - 1 + S, C], exact
    w = weight.reshape(c, kernel).to(F32)
    u32 = u.to(F32)
    acc = torch.zeros((b, s, c), dtype=F32, device=x.device)
    for j in range(kernel):
        acc = acc + u32[:, j:j + s] * w[:, j]
    y = silu(acc).to(x.dtype)
    state = u[:, u.shape[1] - (kernel - 1):].transpose(1, 2).contiguous()
    return y, state


def _ordered_dot(a: Tensor, b: Tensor, axis: int) -> Tensor:
    """sum_i a_i * b_i over ``axis``, each product rounded, added in ascending i from +0."""
    acc = torch.zeros_like(torch.select(a, axis, 0))
    for i in range(a.shape[axis]):
        acc = acc + torch.select(a, axis, i) * torch.select(b, axis, i)
    return acc


def _parted_dot(a: Tensor, b: Tensor, axis: int) -> Tensor:
    """The rule's state sums: ``_ordered_dot`` over parts of GDN_STATE_PART consecutive i, the parts'
    sums then added in ascending order, the first as it is (docs/ops.md)."""
    step = contract.GDN_STATE_PART
    parts = [_ordered_dot(a.narrow(axis, p, min(step, a.shape[axis] - p)), b.narrow(axis, p, min(step, a.shape[axis] - p)),
                          axis) for p in range(0, a.shape[axis], step)]
    acc = parts[0]
    for p in parts[1:]:
        acc = acc + p
    return acc


def l2_normalize(t: Tensor) -> Tensor:
    """t * (1 / sqrt(sum_i t_i^2 + eps)) over the last axis, float32, the sum in ascending i, the
    square root correctly rounded (numerics.sqrt_rn: torch's CPU float32 sqrt is not always)."""
    r = 1.0 / sqrt_rn(_ordered_dot(t, t, -1) + contract.GDN_L2NORM_EPS)
    return t * r[..., None]


def gate_inputs(ba: Tensor, a_log: Tensor, dt_bias: Tensor, heads: int) -> tuple[Tensor, Tensor]:
    """(beta, gamma) [B, S, Hv] in float32: beta = sigmoid(b); gamma = exp(-(exp(A_log) *
    softplus(a + dt_bias))), each transcendental float64 rounded once."""
    b, a = ba[..., :heads].to(F32), ba[..., heads:].to(F32)
    beta = sigmoid(b)
    decay = -(_exp(a_log.to(F32)) * softplus(a + dt_bias.to(F32)))
    return beta, _exp(decay)


def gated_delta_rule(x: Tensor, ba: Tensor, a_log: Tensor, dt_bias: Tensor, state: Tensor, num_k_heads: int,
                     num_v_heads: int, head_k_dim: int, head_v_dim: int) -> tuple[Tensor, Tensor]:
    """The GatedDeltaRule op (docs/ops.md): x [B, S, 2 Hk dk + Hv dv] = [q | k | v], ba [B, S, 2 Hv],
    state [B, Hv, dk, dv] float32 -> (y [B, S, Hv, dv] in x's dtype, state_out)."""
    hk, hv, dk, dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    bsz, s, width = x.shape
    if hv % hk or width != 2 * hk * dk + hv * dv or ba.shape != (bsz, s, 2 * hv) \
            or state.shape != (bsz, hv, dk, dv):
        raise ValueError(f"GatedDeltaRule: x {list(x.shape)}, ba {list(ba.shape)}, state {list(state.shape)} do not "
                         f"match num_k_heads={hk}, num_v_heads={hv}, head_k_dim={dk}, head_v_dim={dv}")
    rep = hv // hk
    x32 = x.to(F32)
    q = x32[..., :hk * dk].reshape(bsz, s, hk, dk).repeat_interleave(rep, dim=2)  # value head h: key head h // rep
    k = x32[..., hk * dk:2 * hk * dk].reshape(bsz, s, hk, dk).repeat_interleave(rep, dim=2)
    v = x32[..., 2 * hk * dk:].reshape(bsz, s, hv, dv)
    q = l2_normalize(q) / torch.tensor(math.sqrt(dk), dtype=F32, device=x.device)
    k = l2_normalize(k)
    beta, gamma = gate_inputs(ba, a_log, dt_bias, hv)
    st = state.to(F32).clone()
    out = torch.empty((bsz, s, hv, dv), dtype=F32, device=x.device)
    for t in range(s):
        st = st * gamma[:, t, :, None, None]
        kt, qt = k[:, t, :, :, None], q[:, t, :, :, None]  # [B, Hv, dk, 1]
        kv = _parted_dot(st, kt.expand_as(st), 2)  # [B, Hv, dv]
        delta = (v[:, t] - kv) * beta[:, t, :, None]
        st = st + kt * delta[:, :, None, :]
        out[:, t] = _parted_dot(st, qt.expand_as(st), 2)
    return out.to(x.dtype), st


def gated_delta_rule_f64(x, ba, a_log, dt_bias, state, num_k_heads, num_v_heads, head_k_dim, head_v_dim):
    """The same formula in float64 with torch's own reductions and no intermediate rounding (tests)."""
    hk, hv, dk, dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    bsz, s, _ = x.shape
    rep = hv // hk
    x64 = x.to(torch.float64)
    q = x64[..., :hk * dk].reshape(bsz, s, hk, dk).repeat_interleave(rep, dim=2)
    k = x64[..., hk * dk:2 * hk * dk].reshape(bsz, s, hk, dk).repeat_interleave(rep, dim=2)
    v = x64[..., 2 * hk * dk:].reshape(bsz, s, hv, dv)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + contract.GDN_L2NORM_EPS) / math.sqrt(dk)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + contract.GDN_L2NORM_EPS)
    b64, a64 = ba[..., :hv].to(torch.float64), ba[..., hv:].to(torch.float64)
    beta = torch.sigmoid(b64)
    gamma = torch.exp(-a_log.to(torch.float64).exp() * torch.nn.functional.softplus(a64 + dt_bias.to(torch.float64)))
    st = state.to(torch.float64).clone()
    out = torch.empty((bsz, s, hv, dv), dtype=torch.float64)
    for t in range(s):
        st = st * gamma[:, t, :, None, None]
        kv = (st * k[:, t, :, :, None]).sum(2)
        delta = (v[:, t] - kv) * beta[:, t, :, None]
        st = st + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = (st * q[:, t, :, :, None]).sum(2)
    return out, st
