"""Qwen3-MoE: a tiny random ``Qwen3MoeForCausalLM`` saved by transformers exports, and ONNX Runtime
matches transformers' float32 forward (prefill and decode steps with the KV cache carried); the
router variants, the sparse-step/mlp-only layer rule and the fused expert layout match in PyTorch
alone (no export, fast); a quantized export matches its PyTorch reference.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from safetensors.torch import load_file, save_file
from stateful import ort_steps, rel, torch_steps

from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.config import parse_config
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.layers.model import CausalLM
from metrale_export.exporter.layers.moe import SparseMoE
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.ops.ort import reference_session

transformers = pytest.importorskip("transformers")

TRANSFORMERS = 1e-4  # docs/ops.md: unquantized export vs transformers (float32)
QUANTIZED = 1e-3  # docs/ops.md: ONNX Runtime vs the PyTorch reference of the quantized model
CHUNKS = [5, 1, 1, 2]


def tiny_config(**overrides):
    kw = dict(vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
              mlp_only_layers=[1], max_position_embeddings=256, rope_theta=10000.0)
    kw.update(overrides)
    return transformers.Qwen3MoeConfig(**kw)


def save_random(cfg, path, seed=0):
    torch.manual_seed(seed)
    model = transformers.Qwen3MoeForCausalLM(cfg).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.add_(0.1 * noise) if "norm" in name else p.copy_(0.1 * noise)
    model.save_pretrained(path)
    return model


def reference_model(path, request: QuantRequest) -> CausalLM:
    ckpt = Checkpoint.open(path)
    source = FloatSource(ckpt, request)
    return CausalLM(parse_config(ckpt.config), source).load_weights(source)


def check_against(hf, model_logits, ids, chunks):
    with torch.no_grad():
        full = hf(torch.from_numpy(ids)).logits.numpy()
    pos = 0
    for n, logits in zip(chunks, model_logits):
        err = rel(logits, full[:, pos:pos + n])
        assert err < TRANSFORMERS, f"tokens {pos}..{pos + n - 1}: relative error {err:.2e}"
        pos += n


@pytest.fixture(scope="module")
def hf_moe(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3_moe") / "hf"
    return save_random(tiny_config(), path), path


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 96, (3, sum(CHUNKS)), generator=torch.Generator().manual_seed(1)).numpy()


def test_layer_plan_follows_sparse_step_and_mlp_only_layers(tmp_path):
    save_random(tiny_config(num_hidden_layers=4, num_experts=6, decoder_sparse_step=2, mlp_only_layers=[3]), tmp_path)
    model = reference_model(tmp_path, QuantRequest())
    kinds = [type(model.model.layers[str(i)].mlp).__name__ for i in range(4)]
    # transformers: sparse where (i + 1) % decoder_sparse_step == 0 and i not in mlp_only_layers
    assert kinds == ["SwiGLU", "SparseMoE", "SwiGLU", "SwiGLU"]
    fams = {n: p.spec.family for n, p in model.projections()}
    assert fams["model.layers.1.mlp.experts.5.gate_proj"] == "moe"
    assert fams["model.layers.0.mlp.up_proj"] == "ffn"


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_torch_reference_matches_transformers(tmp_path, ids, norm_topk_prob):
    hf = save_random(tiny_config(norm_topk_prob=norm_topk_prob), tmp_path)
    check_against(hf, torch_steps(reference_model(tmp_path, QuantRequest()), ids, CHUNKS), ids, CHUNKS)


def test_routing_weights_are_zero_off_the_top_k(hf_moe):
    model = reference_model(hf_moe[1], QuantRequest())
    moe = model.model.layers["0"].mlp
    assert isinstance(moe, SparseMoE)
    w = moe.routing_weights(torch.randn(7, 64))
    assert ((w != 0).sum(-1) == 2).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(7))  # norm_topk_prob


def test_fused_expert_checkpoint_gives_the_same_model(hf_moe, ids, tmp_path):
    """Experts stored as transformers' fused [E, 2I, H] / [E, H, I] tensors read as per-expert."""
    _, path = hf_moe
    tensors = load_file(str(path / "model.safetensors"))
    p = "model.layers.0.mlp.experts"
    gate_up = [torch.cat((tensors.pop(f"{p}.{e}.gate_proj.weight"), tensors.pop(f"{p}.{e}.up_proj.weight")))
               for e in range(4)]
    tensors[f"{p}.gate_up_proj"] = torch.stack(gate_up)
    tensors[f"{p}.down_proj"] = torch.stack([tensors.pop(f"{p}.{e}.down_proj.weight") for e in range(4)])
    fused = tmp_path / "fused"
    fused.mkdir()
    save_file(tensors, str(fused / "model.safetensors"))
    (fused / "config.json").write_text((path / "config.json").read_text())
    a, b = reference_model(path, QuantRequest()), reference_model(fused, QuantRequest())
    for x, y in zip(torch_steps(a, ids, [3, 1]), torch_steps(b, ids, [3, 1])):
        np.testing.assert_array_equal(x, y)


def test_unquantized_export_matches_transformers(hf_moe, ids, tmp_path):
    hf, path = hf_moe
    out = export(path, tmp_path / "onnx", ExportOptions(request=QuantRequest(weight="none"))).out_dir
    check_against(hf, ort_steps(reference_session(out / "model.onnx"), ids, CHUNKS), ids, CHUNKS)


def test_quantized_export_matches_torch_reference(hf_moe, ids, tmp_path):
    _, path = hf_moe
    request = QuantRequest(weight="w8a8")
    out = export(path, tmp_path / "w8a8", ExportOptions(request=request)).out_dir
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    ops = [n for n in graph.node if n.domain == "metrale"]
    fams = [next(a.s.decode() for a in n.attribute if a.name == "family") for n in ops]
    # one sparse layer x 4 experts x 3 projections; one dense FFN; two attention layers
    assert (fams.count("moe"), fams.count("ffn"), fams.count("attn")) == (12, 3, 8)
    got = ort_steps(reference_session(out / "model.onnx"), ids, CHUNKS)
    want = torch_steps(reference_model(path, request), ids, CHUNKS)
    for n, a, b in zip(CHUNKS, got, want):
        assert rel(a, b) < QUANTIZED, (n, rel(a, b))
