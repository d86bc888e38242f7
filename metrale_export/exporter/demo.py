"""The built-in demo checkpoint: a tiny Qwen3-shaped model with seeded random weights.

Written as a real checkpoint (``model.safetensors`` + ``config.json``) so the main job runs end to
end on a fresh machine with no download. Invariants: the same seed gives the same bytes; every
dimension is a multiple of 128 so every weight format and group size applies.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

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
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
}


def demo_tensors(config: dict, seed: int = 0, dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    """Random weights with the names and shapes of a Qwen3 checkpoint."""
    g = torch.Generator().manual_seed(seed)
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    hd = config["head_dim"]
    qn, kvn = config["num_attention_heads"] * hd, config["num_key_value_heads"] * hd

    def rnd(*shape, std=0.05):
        return (torch.randn(*shape, generator=g) * std).to(dtype)

    def norm(n):
        return (1.0 + 0.1 * torch.randn(n, generator=g)).to(dtype)

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
    if not config.get("tie_word_embeddings"):
        t["lm_head.weight"] = rnd(v, h)
    return t


def write_demo(out_dir: str | Path, seed: int = 0) -> Path:
    """Write the demo checkpoint into ``out_dir`` and return the safetensors path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(DEMO_CONFIG, indent=2) + "\n")
    path = out / "model.safetensors"
    save_file(demo_tensors(DEMO_CONFIG, seed), str(path), metadata={"format": "pt"})
    return path
