"""The Attention op's CPU reference (docs/ops.md, "Attention") and a float64 evaluation.

``attention_reference`` follows the op's reduction order step for step in float32: the 64-key
blocks at absolute positions in ascending order with the online softmax, the quad order of the
block's row sum, P rounded to the input dtype, the 256-key chunks folded in ascending order, the
correctly rounded division and the +0. What it cannot reproduce bit for bit is what happens inside
a tensor-core instruction (the order of the 16 products of an mma step) and the GPU's ``ex2.approx``
(relative error below 2^-22); the CUDA kernel therefore matches it within ``ATTENTION_BOUND``
rather than bitwise, and the kernel's own invariances (batch, chunking, decode, run to run) are
bitwise against the kernel (tests/gpu/test_attention_kernel.py).

Invariants: a row's result depends only on its query and its own sequence's keys and values up to
its absolute position; masked keys get x = -inf and p = +0 exactly; nothing here depends on the
batch or on how the sequence was split.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..contract import ATTENTION_BLOCK_KEYS, ATTENTION_CHUNK_BLOCKS, attention_scale_log2

NEG_INF = float("-inf")
# |out - exact| <= ATTENTION_BOUND * (P @ |v|) per element: P's rounding to the dtype (2^-9 relative
# per weight in bf16), the output's rounding (2^-9 of |out| <= P @ |v|), ex2.approx and the float32
# score and sum errors (far below), doubled.
ATTENTION_BOUND = 2.0 ** -7


def operand_dtype(dtype: torch.dtype) -> torch.dtype:
    """The tensor cores' operand type for inputs of ``dtype``: float16 stays, bfloat16 and float32
    (rounded, RNE: the projections' step 0 too) are bfloat16."""
    return torch.float16 if dtype == torch.float16 else torch.bfloat16


def check_shapes(q: Tensor, k: Tensor, v: Tensor, where: str = "Attention") -> tuple[int, int, int, int, int, int]:
    """(batch, q_heads, kv_heads, seq, total, head_dim) of q [B, Hq, S, D], k/v [B, Hkv, T, D]; a
    ValueError naming the mismatch otherwise."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{where}: q, k and v must be 4-d [B, heads, seq, head_dim], found "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    b, hq, s, d = q.shape
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"{where}: k and v must be [{b}, kv_heads, total, {d}], found "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    hkv, t = k.shape[1], k.shape[2]
    if hq % hkv:
        raise ValueError(f"{where}: q_heads {hq} is not a multiple of kv_heads {hkv}")
    if t < s:
        raise ValueError(f"{where}: the cache holds {t} keys, fewer than the {s} queries (total >= seq)")
    return b, hq, hkv, s, t, d


def _quad_row_sum(p: Tensor) -> Tensor:
    """The block's row sum in the kernel's order: quad lane j (0..3) adds its keys 8t + 2j, 8t + 2j + 1
    (t = 0..7) from the left, then (lane0 + lane1) + (lane2 + lane3)."""
    lanes = p.reshape(*p.shape[:-1], 8, 4, 2).transpose(-3, -2).reshape(*p.shape[:-1], 4, 16)
    acc = lanes[..., 0]
    for j in range(1, 16):
        acc = acc + lanes[..., j]
    return (acc[..., 0] + acc[..., 1]) + (acc[..., 2] + acc[..., 3])


def _dot(a: Tensor, b: Tensor) -> Tensor:
    """a [..., R, K] . b [..., N, K] -> [..., R, N] in float32, each element summed over k by the same
    reduction whatever R is (a BLAS matmul may pick its kernel, and so its order, by the shape)."""
    return (a[..., :, None, :] * b[..., None, :, :]).sum(dim=-1)


def _fold(M: Tensor, L: Tensor, O: Tensor, m: Tensor, l: Tensor, o: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """One chunk (m, l, o) into the running (M, L, O): the kernel's foldWeights / foldValue."""
    mn = torch.maximum(M, m)
    a = torch.where(M == mn, torch.ones_like(M), torch.exp2(M - mn))
    b = torch.where(m == mn, torch.ones_like(m), torch.exp2(m - mn))
    return mn, L * a + l * b, O * a[..., None] + o * b[..., None]


def attention_reference(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal GQA attention in the op's order, float32 on the CPU.

    q: [B, Hq, S, D]; k, v: [B, Hkv, T, D] (T >= S: the past and this step's keys); query i sits at
    absolute position T - S + i and sees keys 0 .. T - S + i. Returns [B, S, Hq, D] in q's dtype
    (float32: the operands and P are rounded to bf16, the output is not)."""
    b, hq, hkv, s, t, d = check_shapes(q, k, v)
    g = hq // hkv
    c = attention_scale_log2(scale)
    op_dtype = operand_dtype(q.dtype)
    q32 = q.to(op_dtype).to(torch.float32)
    # Head h reads kv head h // g.
    k32 = k.to(op_dtype).to(torch.float32).repeat_interleave(g, dim=1)
    v32 = v.to(op_dtype).to(torch.float32).repeat_interleave(g, dim=1)
    limit = (t - s) + torch.arange(s)  # [S]: each query's last key
    shape = (b, hq, s)
    M = torch.full(shape, NEG_INF)
    L = torch.zeros(shape)
    O = torch.zeros(shape + (d,))
    n_blocks = (t - 1) // ATTENTION_BLOCK_KEYS + 1
    chunk_blocks = ATTENTION_CHUNK_BLOCKS
    for c0 in range(0, n_blocks, chunk_blocks):
        m = torch.full(shape, NEG_INF)
        l = torch.zeros(shape)
        o = torch.zeros(shape + (d,))
        for blk in range(c0, min(c0 + chunk_blocks, n_blocks)):
            lo = blk * ATTENTION_BLOCK_KEYS
            keys = torch.arange(lo, lo + ATTENTION_BLOCK_KEYS)
            kb = torch.zeros(b, hq, ATTENTION_BLOCK_KEYS, d)
            vb = torch.zeros(b, hq, ATTENTION_BLOCK_KEYS, d)
            hi = min(t, lo + ATTENTION_BLOCK_KEYS)
            kb[:, :, : hi - lo] = k32[:, :, lo:hi]
            vb[:, :, : hi - lo] = v32[:, :, lo:hi]
            x = _dot(q32, kb) * c
            x = x.masked_fill(keys[None, :] > limit[:, None], NEG_INF)
            mn = torch.maximum(m, x.amax(dim=-1))
            sub = torch.where(mn == NEG_INF, torch.zeros_like(mn), mn)
            alpha = torch.where(m == mn, torch.ones_like(m), torch.exp2(m - sub))
            p = torch.exp2(x - sub[..., None])
            l = l * alpha + _quad_row_sum(p)
            m = mn
            pr = p.to(op_dtype).to(torch.float32)
            o = o * alpha[..., None] + _dot(pr, vb.transpose(-1, -2))
        if c0 == 0:
            M, L, O = m, l, o
        else:
            M, L, O = _fold(M, L, O, m, l, o)
    out = O / L[..., None] + 0.0
    return out.to(q.dtype).permute(0, 2, 1, 3).contiguous()


def _probs64(q: Tensor, k: Tensor, v: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    b, hq, hkv, s, t, d = check_shapes(q, k, v)
    g = hq // hkv
    # The operands as the op reads them (float32 rounded to bf16), then exact.
    q, k, v = (x.to(operand_dtype(x.dtype)) for x in (q, k, v))
    q64 = q.to(torch.float64)
    k64 = k.to(torch.float64).repeat_interleave(g, dim=1)
    v64 = v.to(torch.float64).repeat_interleave(g, dim=1)
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * float(torch.tensor(scale, dtype=torch.float32))
    allowed = torch.arange(t)[None, :] <= ((t - s) + torch.arange(s))[:, None]
    return torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1), v64


def attention_float64(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Plain causal GQA softmax attention in float64 of the operands as the op reads them (the exact
    value the bound is against): [B, S, Hq, D] float64."""
    probs, v64 = _probs64(q, k, v, scale)
    return torch.matmul(probs, v64).permute(0, 2, 1, 3).contiguous()


def bound(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """The op's per-element bound against ``attention_float64``: ATTENTION_BOUND * (P @ |v|), the
    softmax-weighted magnitude of the values the element averages, [B, S, Hq, D] float64."""
    probs, v64 = _probs64(q, k, v, scale)
    return (ATTENTION_BOUND * torch.matmul(probs, v64.abs())).permute(0, 2, 1, 3).contiguous()


def default_scale(head_dim: int) -> float:
    """Qwen3's scaling, head_dim ** -0.5."""
    return 1.0 / math.sqrt(head_dim)
