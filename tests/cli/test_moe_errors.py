"""MoE checkpoints that disagree with their config: a one-line error naming the tensor or key, exit
code 2, nothing written (the expert count, a missing expert, top_k above the expert count)."""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from metrale_export.cli.main import cli

transformers = pytest.importorskip("transformers")


@pytest.fixture
def moe_ckpt(tmp_path) -> Path:
    cfg = transformers.Qwen3MoeConfig(
        vocab_size=64, hidden_size=64, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_experts=4, num_experts_per_tok=2,
        max_position_embeddings=64)
    torch.manual_seed(0)
    transformers.Qwen3MoeForCausalLM(cfg).save_pretrained(tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _export_fails(ckpt: Path, *needles):
    out = ckpt.parent / "o"
    r = CliRunner().invoke(cli, ["export", str(ckpt), "-o", str(out), "--weight-quantization", "w8a8", "-q"],
                           catch_exceptions=False)
    assert r.exit_code == 2, r.output
    for needle in needles:
        assert needle in r.output, r.output
    assert not out.exists() and not [p for p in ckpt.parent.iterdir() if p.name.startswith(".o.")]


def _edit_config(ckpt: Path, **keys):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(keys)
    (ckpt / "config.json").write_text(json.dumps(cfg))


def test_more_experts_in_the_checkpoint_than_the_config_says(moe_ckpt):
    _edit_config(moe_ckpt, num_experts=3)
    _export_fails(moe_ckpt, "model.layers.0.mlp.experts", "4 experts", "num_experts=3")


def test_fused_experts_count_mismatch(moe_ckpt):
    t = load_file(str(moe_ckpt / "model.safetensors"))
    p = "model.layers.0.mlp.experts"
    t[f"{p}.gate_up_proj"] = torch.stack([torch.cat((t.pop(f"{p}.{e}.gate_proj.weight"), t.pop(f"{p}.{e}.up_proj.weight")))
                                          for e in range(4)])
    t[f"{p}.down_proj"] = torch.stack([t.pop(f"{p}.{e}.down_proj.weight") for e in range(4)])
    save_file(t, str(moe_ckpt / "model.safetensors"))
    _edit_config(moe_ckpt, num_experts=6)
    _export_fails(moe_ckpt, f"{p}.gate_up_proj", "[4] experts", "num_experts=6")


def test_missing_expert(moe_ckpt):
    t = load_file(str(moe_ckpt / "model.safetensors"))
    t.pop("model.layers.0.mlp.experts.2.down_proj.weight")
    save_file(t, str(moe_ckpt / "model.safetensors"))
    _export_fails(moe_ckpt, "model.layers.0.mlp.experts.2.down_proj.weight", "missing")


def test_top_k_above_the_expert_count(moe_ckpt):
    _edit_config(moe_ckpt, num_experts_per_tok=5)
    _export_fails(moe_ckpt, "num_experts_per_tok=5 exceeds num_experts=4")
