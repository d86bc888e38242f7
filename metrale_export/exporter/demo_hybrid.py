"""The built-in hybrid demo checkpoint: a tiny Qwen3-Next-shaped model (Gated DeltaNet and gated
full-attention layers, sparse MoE with a shared expert, one dense FFN) with seeded random weights.

Written as a real checkpoint (``model.safetensors`` + ``config.json``, transformers' Qwen3-Next
tensor names and its interleaved QKVZ layout) so the hybrid path runs end to end with no download,
and transformers itself can load it. Invariants: the same seed gives the same bytes; every
projection's K is a multiple of 128, so every weight format and group size applies.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from .demo import DEMO_CONFIG_TAIL, SeededWeights, write_checkpoint

HYBRID_DEMO_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 64,
    "linear_value_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "shared_expert_intermediate_size": 256,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [3],
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
    **DEMO_CONFIG_TAIL,
}


def hybrid_demo_tensors(config: dict, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Random weights with the names and shapes of a Qwen3-Next checkpoint."""
    w = SeededWeights(seed, dtype)
    g, rnd = w.generator, w.normal
    c = config
    h, v, hd = c["hidden_size"], c["vocab_size"], c["head_dim"]
    qn, kvn = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    kd = c["linear_num_key_heads"] * c["linear_key_head_dim"]
    vd = c["linear_num_value_heads"] * c["linear_value_head_dim"]
    hv = c["linear_num_value_heads"]

    def offset_norm(n):  # Qwen3-Next's RMSNorm scales by 1 + weight
        return rnd(n, std=0.1)

    def ffn(t, p, inter):
        t[f"{p}.gate_proj.weight"] = rnd(inter, h)
        t[f"{p}.up_proj.weight"] = rnd(inter, h)
        t[f"{p}.down_proj.weight"] = rnd(h, inter)

    t = {"model.embed_tokens.weight": rnd(v, h, std=1.0), "model.norm.weight": offset_norm(h)}
    for layer, kind in enumerate(c["layer_types"]):
        p = f"model.layers.{layer}"
        t[f"{p}.input_layernorm.weight"] = offset_norm(h)
        t[f"{p}.post_attention_layernorm.weight"] = offset_norm(h)
        if kind == "linear_attention":
            a = f"{p}.linear_attn"
            t[f"{a}.in_proj_qkvz.weight"] = rnd(2 * kd + 2 * vd, h)
            t[f"{a}.in_proj_ba.weight"] = rnd(2 * hv, h)
            t[f"{a}.conv1d.weight"] = rnd(2 * kd + vd, 1, c["linear_conv_kernel_dim"], std=0.3)
            t[f"{a}.dt_bias"] = w.around_one(hv)
            t[f"{a}.A_log"] = torch.empty(hv).uniform_(1.0, 16.0, generator=g).log().to(dtype)
            t[f"{a}.norm.weight"] = w.around_one(c["linear_value_head_dim"])
            t[f"{a}.out_proj.weight"] = rnd(h, vd)
        else:
            a = f"{p}.self_attn"
            t[f"{a}.q_proj.weight"] = rnd(2 * qn, h)  # per head [query | gate]
            t[f"{a}.k_proj.weight"] = rnd(kvn, h)
            t[f"{a}.v_proj.weight"] = rnd(kvn, h)
            t[f"{a}.o_proj.weight"] = rnd(h, qn)
            t[f"{a}.q_norm.weight"] = offset_norm(hd)
            t[f"{a}.k_norm.weight"] = offset_norm(hd)
        sparse = layer not in c["mlp_only_layers"] and (layer + 1) % c["decoder_sparse_step"] == 0
        if sparse:
            t[f"{p}.mlp.gate.weight"] = rnd(c["num_experts"], h, std=1.0 / math.sqrt(h))
            for e in range(c["num_experts"]):
                ffn(t, f"{p}.mlp.experts.{e}", c["moe_intermediate_size"])
            ffn(t, f"{p}.mlp.shared_expert", c["shared_expert_intermediate_size"])
            t[f"{p}.mlp.shared_expert_gate.weight"] = rnd(1, h)
        else:
            ffn(t, f"{p}.mlp", c["intermediate_size"])
    if not c.get("tie_word_embeddings"):
        t["lm_head.weight"] = rnd(v, h)
    return t


def write_hybrid_demo(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the hybrid demo checkpoint into ``out_dir`` and return the safetensors path."""
    return write_checkpoint(out_dir, HYBRID_DEMO_CONFIG, hybrid_demo_tensors(HYBRID_DEMO_CONFIG, seed))
