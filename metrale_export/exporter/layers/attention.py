"""Qwen3 attention: q/k/v (one fused op, or three) and o projections, per-head q_norm/k_norm, RoPE, grouped-query attention
with a causal mask over an explicit KV cache.

Invariants: the KV cache is an input ``[B, kv_heads, past, head_dim]`` and the output is the cache
with this step's keys and values appended (``past + seq``); query row i of a step sees keys
``0 .. past + i``; the attention itself is one ``metrale::Attention`` op.
"""

from __future__ import annotations

import torch
from torch import nn

from ...ops import torch_ops  # noqa: F401  (defines metrale::attention)
from .. import fusion
from ..projection import Projection
from .norm import RMSNorm
from .rope import apply_rotary
from ..projection_source import ProjectionSource


def attention_plan(cfg, source: ProjectionSource, prefix: str, q_rows: int = 1) -> dict:
    """The projection specs of one attention block at ``prefix`` (``...self_attn``; headers checked,
    nothing read): ``qkv_proj`` (or q/k/v, fusion.py) and ``o_proj``. ``q_rows``: q_proj's rows per
    query element (Qwen3-Next's gated attention: 2, the query and its gate)."""
    h, hd = cfg.hidden_size, cfg.head_dim
    qn, kvn = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    qkv = fusion.plan(source, prefix, fusion.QKV, (q_rows * qn, kvn, kvn), h, "attn", bias=cfg.attention_bias)
    return {**qkv, "o_proj": source.spec(f"{prefix}.o_proj", h, qn, "attn")}


class AttentionCore(nn.Module):
    """The metrale ``Attention`` op of one layer: forward(q, key, value) -> [B, S, Hq, D].

    ``op_name`` is its node's ``name`` (the layer's ``self_attn`` prefix): compare's per-op check
    runs this module on ONNX Runtime's own inputs of that node."""

    def __init__(self, heads: int, kv_heads: int, head_dim: int, scaling: float, name: str):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.scaling = heads, kv_heads, head_dim, float(scaling)
        self.op_name = name

    def forward(self, q, key, value):
        return torch.ops.metrale.attention(q, key, value, self.heads, self.kv_heads, self.head_dim, self.scaling,
                                           "attn", self.op_name)


def cached_attention(q, k, v, past_k, past_v, core: AttentionCore):
    """Grouped-query causal attention over a KV cache: the metrale ``Attention`` op (docs/ops.md).

    q: [B, heads, S, D]; k, v: [B, kv_heads, S, D]; past_k/v: [B, kv_heads, past, D].
    Returns (out [B, S, heads * D], keys [B, kv_heads, past + S, D], values likewise).

    The cache concatenation stays in the graph; the op reduces each (sequence, head, position) over
    64-key blocks at absolute positions, so a token's result depends neither on its batch nor on
    how its sequence was split into prefill chunks (the CUDA kernel on CUDA tensors, the CPU
    reference elsewhere; the ONNX export emits one ``metrale::Attention`` node).
    """
    b, heads, s, d = q.shape
    k_all = torch.cat((past_k, k), dim=2)
    v_all = torch.cat((past_v, v), dim=2)
    out = core(q, k_all, v_all)
    return out.reshape(b, s, heads * d), k_all, v_all


class Attention(nn.Module):
    # The per-head q/k norm; variants (Qwen3-Next's offset norm) override it.
    norm_cls: type[nn.Module] = RMSNorm

    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        self.scaling = self.head_dim ** -0.5
        # The module's checkpoint prefix ("model.layers.3.self_attn"): the op's name, for messages.
        self.core = AttentionCore(self.heads, self.kv_heads, self.head_dim, self.scaling,
                                  specs["o_proj"].name.rsplit(".", 1)[0])
        for name, spec in specs.items():  # qkv_proj or q_proj, k_proj, v_proj; o_proj
            setattr(self, name, Projection(spec, dtype))
        self.qkv_split = fusion.split_sizes(specs, fusion.QKV)
        self.q_norm = self.norm_cls(self.head_dim, cfg.rms_norm_eps, dtype)
        self.k_norm = self.norm_cls(self.head_dim, cfg.rms_norm_eps, dtype)

    def project(self, x):
        """``i -> `` the output of q_proj, k_proj or v_proj (0, 1, 2): a piece of the fused op's
        output, or that op's, run when asked (so the unfused graph keeps its node order)."""
        if self.qkv_split is not None:
            return self.qkv_proj(x).split(self.qkv_split, dim=-1).__getitem__
        projections = (self.q_proj, self.k_proj, self.v_proj)
        return lambda i: projections[i](x)

    def forward(self, x, cos, sin, past_k, past_v):
        b, s, _ = x.shape
        qkv = self.project(x)
        q = self.q_norm(qkv(0).reshape(b, s, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(qkv(1).reshape(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = qkv(2).reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out, k_all, v_all = cached_attention(q, k, v, past_k, past_v, self.core)
        return self.o_proj(out), k_all, v_all
