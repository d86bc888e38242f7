"""Held-out checkpoints made with transformers from random weights, small hidden sizes so they export
in seconds: Qwen3 of a given depth with outlier channels (a few hidden channels of the embedding and
of the norms' gains scaled up, as trained models have) for the compare tests, and Qwen3-MoE and
Qwen3-Next for the row-invariance audit."""

from __future__ import annotations

from pathlib import Path

OUTLIER_CHANNELS = (3, 77)
OUTLIER_GAIN = 20.0


def write_qwen3(out_dir: Path, layers: int, hidden: int = 128, intermediate: int = 256, vocab: int = 512,
                seed: int = 0) -> Path:
    """A Qwen3ForCausalLM checkpoint directory (bf16 safetensors + config.json)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                      max_position_embeddings=4096, tie_word_embeddings=False, torch_dtype="bfloat16")
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 2:
                p.normal_(0.0, 0.05)
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        ch = list(OUTLIER_CHANNELS)
        model.model.embed_tokens.weight[:, ch] *= OUTLIER_GAIN
        for layer in model.model.layers:
            layer.input_layernorm.weight[ch] *= OUTLIER_GAIN / 4
            layer.post_attention_layernorm.weight[ch] *= OUTLIER_GAIN / 4
    model.to(torch.bfloat16).save_pretrained(str(out_dir), safe_serialization=True)
    return Path(out_dir)


def randomize(model, seed: int = 0, scale: float = 0.05) -> None:
    """Weights far from their init (norm gains, A_log and dt_bias moved off their defaults by 0.2 x
    noise; every other weight ``scale`` x noise) so a misplaced term shows."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name or "A_log" in name or "dt_bias" in name:
                p.add_(0.2 * noise)
            else:
                p.copy_(scale * noise)


def write_qwen3_moe(out_dir: Path, layers: int = 4, experts: int = 8, seed: int = 0) -> Path:
    """A Qwen3MoeForCausalLM checkpoint (bf16), its last layer dense (``mlp_only_layers``)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3MoeConfig(vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                         num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                         num_experts=experts, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                         mlp_only_layers=[layers - 1], max_position_embeddings=4096)
    model = Qwen3MoeForCausalLM(cfg).eval()
    randomize(model, seed)
    model.to(torch.bfloat16).save_pretrained(str(out_dir), safe_serialization=True)
    return Path(out_dir)


def write_qwen3_next(out_dir: Path, layers: int = 4, experts: int = 8, seed: int = 0) -> Path:
    """A Qwen3NextForCausalLM checkpoint (bf16): Gated DeltaNet layers with full attention every
    second layer, routed experts with a shared expert."""
    import torch
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3NextConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=64, linear_num_key_heads=2,
                          linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
                          linear_conv_kernel_dim=4, full_attention_interval=2, num_experts=experts,
                          num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=128,
                          max_position_embeddings=4096)
    model = Qwen3NextForCausalLM(cfg).eval()
    randomize(model, seed)
    model.to(torch.bfloat16).save_pretrained(str(out_dir), safe_serialization=True)
    return Path(out_dir)
