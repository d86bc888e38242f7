"""The dense Qwen3 decoder layer: pre-norm attention and a SwiGLU FFN with residuals.

Follows the decoder-layer protocol of ``model.py``; registered for the ``qwen3`` family in
``registry.py``.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import Attention, attention_plan
from .ffn import SwiGLU, swiglu_specs
from .norm import RMSNorm
from .state import StateSpec
from ..projection_source import ProjectionSource


class DecoderLayer(nn.Module):
    """Pre-norm attention and FFN with residuals (Qwen3 dense)."""

    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.self_attn = Attention(cfg, specs["self_attn"], dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = SwiGLU(specs["mlp"], dtype)

    def forward(self, x, cos, sin, past_k, past_v):
        h, k, v = self.self_attn(self.input_layernorm(x), cos, sin, past_k, past_v)
        normed, x = self.post_attention_layernorm(h, residual=x)  # x + h, fused into the norm
        x = x + self.mlp(normed)
        return x, k, v

    def state_specs(self) -> tuple[StateSpec, ...]:
        attn = self.self_attn
        shape = ("batch", attn.kv_heads, "past", attn.head_dim)
        return (StateSpec("past_key", "present_key", shape), StateSpec("past_value", "present_value", shape))

    @staticmethod
    def plan(cfg, source: ProjectionSource, prefix: str) -> dict:
        """The projection specs of one layer (headers checked, nothing read)."""
        attn = attention_plan(cfg, source, f"{prefix}.self_attn")
        mlp = swiglu_specs(source, f"{prefix}.mlp", cfg.hidden_size, cfg.intermediate_size, "ffn")
        return {"self_attn": attn, "mlp": mlp}

    @staticmethod
    def plain_tensors(cfg, prefix: str) -> dict[str, tuple[int, ...]]:
        h, hd = cfg.hidden_size, cfg.head_dim
        return {
            f"{prefix}.input_layernorm.weight": (h,),
            f"{prefix}.post_attention_layernorm.weight": (h,),
            f"{prefix}.self_attn.q_norm.weight": (hd,),
            f"{prefix}.self_attn.k_norm.weight": (hd,),
        }
