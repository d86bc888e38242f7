"""Qwen3-Next: hybrid decoder layers (Gated DeltaNet or gated full attention, per ``layer_types``),
each followed by the sparse MoE with a shared expert (or a dense FFN: ``mlp_only_layers``,
``decoder_sparse_step``).

What differs from Qwen3 (transformers' modeling_qwen3_next):
- every RMSNorm but the GDN's gated one scales by ``1 + weight`` in float32 (``OffsetRMSNorm``);
- full attention: ``q_proj`` yields per head ``[query | gate]`` (``2 * head_dim`` rows a head, the
  checkpoint's layout, exported as is), and the attention output is multiplied by
  ``sigmoid(gate)`` before ``o_proj``; RoPE rotates only the first
  ``head_dim * partial_rotary_factor`` dimensions of each head;
- token mixers of ``linear_attention`` layers are Gated DeltaNet (``gdn.py``).

Invariants: a layer's graph states are those of its mixer: ``past_key``/``past_value`` for full
attention, ``conv_state``/``recurrent_state`` for GDN (outputs ``present_*``).
"""

from __future__ import annotations

import torch
from torch import nn

from ...errors import ConfigError
from .attention import Attention, attention_plan, cached_attention
from .gdn import GatedDeltaNet, gdn_config, gdn_plain_tensors, gdn_plan, gdn_recipes
from .state import StateSpec
from .moe import build_mlp, expert_recipes, layer_index, mlp_plain_tensors, mlp_plan, moe_config
from .norm import RMSNorm
from .rope import apply_rotary
from ..projection_source import ProjectionSource

LAYER_KINDS = ("linear_attention", "full_attention")


def layer_types(cfg) -> list[str]:
    """``layer_types`` of config.json, or transformers' default from ``full_attention_interval``."""
    raw, where = cfg.raw, f"config.json ({cfg.architecture})"
    types = raw.get("layer_types")
    if types is None:
        return _interval_layer_types(raw.get("full_attention_interval", 4), cfg.num_hidden_layers, where)
    if not _valid_layer_types(types, cfg.num_hidden_layers):
        raise ConfigError(f"{where}: key 'layer_types': expected {cfg.num_hidden_layers} entries of "
                          f"{' or '.join(LAYER_KINDS)}, found {types!r}")
    return list(types)


def _interval_layer_types(interval, num_layers: int, where: str) -> list[str]:
    """Every ``interval``-th layer full attention, the others linear (transformers' default)."""
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise ConfigError(f"{where}: key 'full_attention_interval': expected a positive integer, found {interval!r}")
    return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(num_layers)]


def _valid_layer_types(types, num_layers: int) -> bool:
    return isinstance(types, list) and len(types) == num_layers and all(t in LAYER_KINDS for t in types)


def partial_rotary_factor(cfg) -> float:
    params = cfg.raw.get("rope_parameters") or cfg.raw.get("rope_scaling") or {}
    factor = params.get("partial_rotary_factor", cfg.raw.get("partial_rotary_factor", 0.25))
    if not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ConfigError(f"config.json ({cfg.architecture}): key 'partial_rotary_factor': expected a number "
                          f"in (0, 1], found {factor!r}")
    return float(factor)


def next_moe(cfg):
    return moe_config(cfg, shared_expert=True, norm_topk_default=True)


class OffsetRMSNorm(RMSNorm):
    """Qwen3-Next's RMSNorm: ``norm(x) * (1 + weight)`` in float32, cast back once."""

    weight_offset = 1


def apply_partial_rotary(x, cos, sin):
    """RoPE on the first ``cos.shape[-1]`` dims of each head of x ``[B, heads, S, D]``."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return apply_rotary(x, cos, sin)
    return torch.cat((apply_rotary(x[..., :rot], cos, sin), x[..., rot:]), dim=-1)


class GatedAttention(Attention):
    """Qwen3-Next full attention (see the module docstring); KV cache as Qwen3's."""

    norm_cls = OffsetRMSNorm

    def forward(self, x, cos, sin, past_k, past_v):
        b, s, _ = x.shape
        qkv = self.project(x)
        qg = qkv(0).reshape(b, s, self.heads, 2 * self.head_dim)
        q, gate = qg[..., :self.head_dim], qg[..., self.head_dim:]
        gate = gate.reshape(b, s, self.heads * self.head_dim)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(qkv(1).reshape(b, s, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = qkv(2).reshape(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_partial_rotary(q, cos, sin), apply_partial_rotary(k, cos, sin)
        out, k_all, v_all = cached_attention(q, k, v, past_k, past_v, self.core)
        out = out * torch.sigmoid(gate)
        return self.o_proj(out), k_all, v_all


def gated_attention_plan(cfg, source: ProjectionSource, prefix: str) -> dict:
    """The projections of a gated full-attention block at ``prefix`` (``...self_attn``): q_proj
    holds each head's query and gate (2 x the query's rows)."""
    return attention_plan(cfg, source, prefix, q_rows=2)


def gated_attention_plain_tensors(cfg, prefix: str) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.q_norm.weight": (cfg.head_dim,), f"{prefix}.k_norm.weight": (cfg.head_dim,)}


class Qwen3NextDecoderLayer(nn.Module):
    """Pre-norm token mixer (GDN or gated attention) and MoE/dense FFN with residuals."""

    final_norm = OffsetRMSNorm
    routed_experts = True

    def __init__(self, cfg, specs: dict, dtype: torch.dtype):
        super().__init__()
        self.kind = specs["kind"]
        self.input_layernorm = OffsetRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        if self.kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(gdn_config(cfg), specs["linear_attn"], dtype)
        else:
            self.self_attn = GatedAttention(cfg, specs["self_attn"], dtype)
        self.post_attention_layernorm = OffsetRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype)
        self.mlp = build_mlp(cfg, next_moe(cfg), specs["mlp"], dtype)

    def forward(self, x, cos, sin, *states):
        h = self.input_layernorm(x)
        if self.kind == "linear_attention":
            h, *new = self.linear_attn(h, *states)
        else:
            h, *new = self.self_attn(h, cos, sin, *states)
        normed, x = self.post_attention_layernorm(h, residual=x)  # x + h, fused into the norm
        x = x + self.mlp(normed)
        return (x, *new)

    def state_specs(self) -> tuple[StateSpec, ...]:
        if self.kind == "linear_attention":
            g = self.linear_attn.g
            return (StateSpec("conv_state", "present_conv_state", ("batch", g.conv_dim, g.conv_kernel - 1)),
                    StateSpec("recurrent_state", "present_recurrent_state",
                              ("batch", g.num_v_heads, g.head_k_dim, g.head_v_dim), torch.float32))
        attn = self.self_attn
        shape = ("batch", attn.kv_heads, "past", attn.head_dim)
        return (StateSpec("past_key", "present_key", shape), StateSpec("past_value", "present_value", shape))

    @staticmethod
    def rotary_dim(cfg) -> int:
        return int(cfg.head_dim * partial_rotary_factor(cfg))

    @staticmethod
    def plan(cfg, source: ProjectionSource, prefix: str) -> dict:
        kind = layer_types(cfg)[layer_index(prefix)]
        out = {"kind": kind, "mlp": mlp_plan(cfg, next_moe(cfg), source, prefix)}
        if kind == "linear_attention":
            out["linear_attn"] = gdn_plan(gdn_config(cfg), source, f"{prefix}.linear_attn")
        else:
            out["self_attn"] = gated_attention_plan(cfg, source, f"{prefix}.self_attn")
        return out

    @staticmethod
    def plain_tensors(cfg, prefix: str) -> dict[str, tuple[int, ...]]:
        h = cfg.hidden_size
        out = {f"{prefix}.input_layernorm.weight": (h,), f"{prefix}.post_attention_layernorm.weight": (h,)}
        if layer_types(cfg)[layer_index(prefix)] == "linear_attention":
            out.update(gdn_plain_tensors(gdn_config(cfg), f"{prefix}.linear_attn"))
        else:
            out.update(gated_attention_plain_tensors(cfg, f"{prefix}.self_attn"))
        out.update(mlp_plain_tensors(cfg, next_moe(cfg), prefix))
        return out

    @staticmethod
    def recipes(cfg, ckpt, prefix: str) -> dict:
        i = layer_index(prefix)
        out = {}
        if layer_types(cfg)[i] == "linear_attention":
            out.update(gdn_recipes(gdn_config(cfg), ckpt, f"{prefix}.linear_attn"))
        moe = next_moe(cfg)
        if moe.is_sparse(i):
            out.update(expert_recipes(cfg, moe, ckpt, prefix))
        return out

