"""The built-in demo checkpoints: a tiny Qwen3-shaped model with seeded random weights, and its
Qwen3-MoE variant (``write_moe_demo``: sparse experts with top-k routing, one dense layer).

Written as a real checkpoint (``model.safetensors`` + ``config.json``) so the main job runs end to
end on a fresh machine with no download. Invariants: the same seed gives the same bytes; every
dimension is a multiple of 128 so every weight format and group size applies. ``SeededWeights``,
``write_checkpoint`` and ``DEMO_CONFIG_TAIL`` serve the hybrid demo too (demo_hybrid.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

# What every demo config ends with: its context, an lm_head of its own, no attention bias, bf16.
DEMO_CONFIG_TAIL = {
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}

DEMO_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "vocab_size": 512,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    **DEMO_CONFIG_TAIL,
}


class SeededWeights:
    """The random source of a demo checkpoint: one generator, drawn from in the order the tensors
    are made (the same seed, the same bytes)."""

    def __init__(self, seed: int, dtype: torch.dtype):
        self.generator = torch.Generator().manual_seed(seed)
        self.dtype = dtype

    def normal(self, *shape, std: float = 0.05) -> torch.Tensor:
        """Normal weights of standard deviation ``std``, rounded to the checkpoint's dtype."""
        return (torch.randn(*shape, generator=self.generator) * std).to(self.dtype)

    def around_one(self, n: int) -> torch.Tensor:
        """A norm's scales: 1 plus normal noise of standard deviation 0.1."""
        return (1.0 + 0.1 * torch.randn(n, generator=self.generator)).to(self.dtype)


def demo_tensors(config: dict, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Random weights with the names and shapes of a Qwen3 checkpoint."""
    w = SeededWeights(seed, dtype)
    rnd, norm = w.normal, w.around_one
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = config["head_dim"]
    qn, kvn = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    t = {"model.embed_tokens.weight": rnd(v, h, std=1.0), "model.norm.weight": norm(h)}
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        t[f"{p}.input_layernorm.weight"] = norm(h)
        t[f"{p}.post_attention_layernorm.weight"] = norm(h)
        t[f"{p}.self_attn.q_proj.weight"] = rnd(qn, h)
        t[f"{p}.self_attn.k_proj.weight"] = rnd(kvn, h)
        t[f"{p}.self_attn.v_proj.weight"] = rnd(kvn, h)
        t[f"{p}.self_attn.o_proj.weight"] = rnd(h, qn)
        t[f"{p}.self_attn.q_norm.weight"] = norm(hd)
        t[f"{p}.self_attn.k_norm.weight"] = norm(hd)
        t[f"{p}.mlp.gate_proj.weight"] = rnd(i, h)
        t[f"{p}.mlp.up_proj.weight"] = rnd(i, h)
        t[f"{p}.mlp.down_proj.weight"] = rnd(h, i)
        if layer in _sparse_layers(config):  # Qwen3-MoE: the router and the experts replace the MLP
            del t[f"{p}.mlp.gate_proj.weight"], t[f"{p}.mlp.up_proj.weight"], t[f"{p}.mlp.down_proj.weight"]
            t[f"{p}.mlp.gate.weight"] = rnd(config["num_experts"], h, std=h ** -0.5)
            mi = config["moe_intermediate_size"]
            for e in range(config["num_experts"]):
                t[f"{p}.mlp.experts.{e}.gate_proj.weight"] = rnd(mi, h)
                t[f"{p}.mlp.experts.{e}.up_proj.weight"] = rnd(mi, h)
                t[f"{p}.mlp.experts.{e}.down_proj.weight"] = rnd(h, mi)
    if not config.get("tie_word_embeddings"):
        t["lm_head.weight"] = rnd(v, h)
    return t


def _sparse_layers(config: dict) -> list[int]:
    """The layers with experts: none for dense Qwen3; Qwen3-MoE's rule (every ``decoder_sparse_step``
    th layer, except ``mlp_only_layers``)."""
    if "num_experts" not in config:
        return []
    step, only = config.get("decoder_sparse_step", 1), config.get("mlp_only_layers", [])
    return [i for i in range(config["num_hidden_layers"]) if i not in only and (i + 1) % step == 0]


# Qwen3-MoE: the dense demo's shapes, 4 experts (top 2) in layer 0, the dense MLP in layer 1.
MOE_DEMO_CONFIG = {
    **DEMO_CONFIG,
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 256,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [1],
    "hidden_act": "silu",
}


def write_demo(out_dir: str | Path, seed: int = 0, config: dict = DEMO_CONFIG) -> Path:
    """Write the demo checkpoint (or another ``config``'s) into ``out_dir``; return the safetensors path."""
    return write_checkpoint(out_dir, config, demo_tensors(config, seed))


def write_checkpoint(out_dir: str | Path, config: dict, tensors: dict[str, torch.Tensor]) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``out_dir`` (made if missing); return
    the safetensors path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    path = out / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def write_moe_demo(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the Qwen3-MoE demo checkpoint into ``out_dir`` and return the safetensors path."""
    return write_demo(out_dir, seed, MOE_DEMO_CONFIG)
