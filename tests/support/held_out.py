"""Held-out checkpoints for the compare tests: Qwen3 of a given depth made with transformers from
random weights, with outlier channels (a few hidden channels of the embedding and of the norms'
gains scaled up, as trained models have), small hidden sizes so they export in seconds."""

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
