"""Qwen3 attention: q/k/v/o projections, per-head q_norm/k_norm, RoPE, grouped-query attention
with a causal mask over an explicit KV cache.

Invariants: the KV cache is an input ``[B, kv_heads, past, head_dim]`` and the output is the cache
with this step's keys and values appended (``past + seq``); query row i of a step sees keys
``0 .. past + i``.
"""

from __future__ import annotations

import torch
from torch import nn

from ..projection import Projection
from .norm import RMSNorm
from .rope import apply_rotary


def attention_plan(cfg, source, prefix: str) -> dict:
    """The q/k/v/o projection specs of one attention layer (headers checked, nothing read)."""
    h, hd = cfg.hidden_size, cfg.head_dim
    qn, kvn = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    bias = cfg.attention_bias
    return {
        "q_proj": source.spec(f"{prefix}.self_attn.q_proj", qn, h, "attn", bias=bias),
        "k_proj": source.spec(f"{prefix}.self_attn.k_proj", kvn, h, "attn", bias=bias),
        "v_proj": source.spec(f"{prefix}.self_attn.v_proj", kvn, h, "attn", bias=bias),
        "o_proj": source.spec(f"{prefix}.self_attn.o_proj", h, qn, "attn"),
    }


def cached_attention(q, k, v, past_k, past_v, scaling: float):
    """Grouped-query causal attention over a KV cache.

    q: [B, heads, S, D]; k, v: [B, kv_heads, S, D]; past_k/v: [B, kv_heads, past, D].
    Returns (out [B, S, heads * D], keys [B, kv_heads, past + S, D], values likewise).

    On CUDA in eager mode a batch runs one sequence at a time: torch's batched GPU matmuls choose
    their kernel by the batch size, so a row alone and inside a batch can differ in the last bit
    (measured on the H200: probs @ v of 33 decode rows, every row), and the model-level row
    invariance check is then about torch, not about the metrale kernels. Elsewhere (CPU, and the
    graph that export traces) the batch runs at once, unchanged.
    """
    if q.is_cuda and q.shape[0] > 1 and not torch.compiler.is_compiling():
        parts = [cached_attention(q[i:i + 1], k[i:i + 1], v[i:i + 1], past_k[i:i + 1], past_v[i:i + 1], scaling)
                 for i in range(q.shape[0])]
        return tuple(torch.cat(t, dim=0) for t in zip(*parts))
    b, heads, s, d = q.shape
    kv_heads = k.shape[1]
    k_all = torch.cat((past_k, k), dim=2)
    v_all = torch.cat((past_v, v), dim=2)
    total = k_all.shape[2]
    rep = heads // kv_heads
    kr = k_all[:, :, None].expand(b, kv_heads, rep, total, d).reshape(b, heads, total, d)
    vr = v_all[:, :, None].expand(b, kv_heads, rep, total, d).reshape(b, heads, total, d)
    scores = torch.matmul(q, kr.transpose(2, 3)) * scaling
    past = total - s
    allowed = torch.arange(total, device=q.device)[None, :] <= (torch.arange(s, device=q.device) + past)[:, None]
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores.to(torch.float32), dim=-1).to(q.dtype)
    out = torch.matmul(probs, vr).transpose(1, 2).reshape(b, s, heads * d)
    return out, k_all, v_all


class Attention(nn.Module):
    # The per-head q/k norm; variants (Qwen3-Next's offset norm) override it.
    norm_cls: type[nn.Module] = RMSNorm

    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scaling = self.head_dim ** -0.5
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, Projection(specs[name], dtype))
        self.q_norm = self.norm_cls(self.head_dim, cfg.rms_norm_eps, dtype)
        self.k_norm = self.norm_cls(self.head_dim, cfg.rms_norm_eps, dtype)

    def forward(self, x, cos, sin, past_k, past_v):
        b, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).reshape(b, s, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).reshape(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out, k_all, v_all = cached_attention(q, k, v, past_k, past_v, self.scaling)
        return self.o_proj(out), k_all, v_all
