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


class Attention(nn.Module):
    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scaling = self.head_dim ** -0.5
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, Projection(specs[name], dtype))
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, dtype)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, dtype)

    def forward(self, x, cos, sin, past_k, past_v):
        b, s, _ = x.shape
        q = self.q_norm(self.q_proj(x).reshape(b, s, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).reshape(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k_all = torch.cat((past_k, k), dim=2)
        v_all = torch.cat((past_v, v), dim=2)
        total = k_all.shape[2]
        rep = self.heads // self.kv_heads
        kr = k_all[:, :, None].expand(b, self.kv_heads, rep, total, self.head_dim).reshape(b, self.heads, total, self.head_dim)
        vr = v_all[:, :, None].expand(b, self.kv_heads, rep, total, self.head_dim).reshape(b, self.heads, total, self.head_dim)
        scores = torch.matmul(q, kr.transpose(2, 3)) * self.scaling
        past = total - s
        allowed = torch.arange(total, device=x.device)[None, :] <= (torch.arange(s, device=x.device) + past)[:, None]
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        probs = torch.softmax(scores.to(torch.float32), dim=-1).to(q.dtype)
        out = torch.matmul(probs, vr).transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        return self.o_proj(out), k_all, v_all
