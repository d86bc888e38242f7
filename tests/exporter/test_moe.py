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
from support.stateful import ort_steps, rel, torch_steps

from metrale_export import contract
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.config import parse_config
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.layers.model import CausalLM
from metrale_export.exporter.layers.moe import SparseMoE
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.ops import tolerances
from metrale_export.ops.ort import reference_session

transformers = pytest.importorskip("transformers")

TRANSFORMERS = tolerances.TRANSFORMERS  # docs/ops.md: unquantized export vs transformers
QUANTIZED = tolerances.MODEL_QUANTIZED  # docs/ops.md: ONNX Runtime vs the PyTorch reference of the quantized model
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
    assert fams["model.layers.1.mlp.experts.5.gate_up_proj"] == "moe"  # float experts: the dense form
    assert fams["model.layers.0.mlp.gate_up_proj"] == "ffn"


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


def _projection_nodes(out, attention_layers, sparse_layers):
    """The metrale projection nodes; the other metrale nodes are the norms, the float lm_head and
    router gates, one Attention per attention layer and one Router per sparse layer."""
    graph = onnx.load(str(out / "model.onnx"), load_external_data=False).graph
    nodes = [n for n in graph.node if n.domain == contract.DOMAIN]
    assert sorted({n.op_type for n in nodes} - set(contract.projections())) == ["Attention", "FloatProj", "RMSNorm",
                                                                                 "Router"]
    assert sum(n.op_type == "Attention" for n in nodes) == attention_layers
    assert sum(n.op_type == "Router" for n in nodes) == sparse_layers
    # the float projections: lm_head and one router gate per sparse layer
    assert sorted(_attr(n, "name").decode() for n in nodes if n.op_type == "FloatProj") == sorted(
        ["lm_head"] + [_attr(n, "name").decode().rsplit(".", 1)[0] + ".gate" for n in nodes if n.op_type == "Router"])
    return [n for n in nodes if n.op_type in contract.projections()]


def _attr(node, name):
    return onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == name))


@pytest.mark.parametrize("fmt", ["w8a8", "w4a16", "w4a4"])
def test_quantized_export_matches_torch_reference(hf_moe, ids, tmp_path, fmt):
    """Grouped-expert ops: two nodes for the sparse layer (gate|up fused, down with the combine)."""
    _, path = hf_moe
    request = QuantRequest(weight=fmt, group_size=32)
    out = export(path, tmp_path / fmt, ExportOptions(request=request)).out_dir
    ops = _projection_nodes(out, attention_layers=2, sparse_layers=1)
    fams = [_attr(n, "family").decode() for n in ops]
    # one sparse layer: gate_up, down grouped; one dense FFN (gate_up, down); two attention layers (qkv, o)
    assert (fams.count("moe"), fams.count("ffn"), fams.count("attn")) == (2, 2, 4)
    moe = [n for n in ops if n.op_type.endswith("MoEProj")]
    assert [(_attr(n, "name").decode().rsplit(".", 1)[1], _attr(n, "combine"), _attr(n, "num_experts"),
             _attr(n, "top_k")) for n in moe] == [("gate_up_proj", 0, 4, 2), ("down_proj", 1, 4, 2)]
    assert _attr(moe[0], "n") == 2 * _attr(moe[1], "k")  # each expert's [gate; up] rows
    got = ort_steps(reference_session(out / "model.onnx"), ids, CHUNKS)
    want = torch_steps(reference_model(path, request), ids, CHUNKS)
    for n, a, b in zip(CHUNKS, got, want):
        assert rel(a, b) < QUANTIZED, (n, rel(a, b))


def test_grouped_experts_compute_the_dense_form(hf_moe, ids):
    """The grouped ops and one projection per expert on every row give the same model (float32: the
    unselected experts add exact zeros in the dense form)."""
    _, path = hf_moe
    grouped = reference_model(path, QuantRequest(weight="w4a16", group_size=32))
    dense = reference_model(path, QuantRequest(weight="w4a16", group_size=32, moe_experts="dense"))
    assert grouped.model.layers["0"].mlp.grouped and not dense.model.layers["0"].mlp.grouped
    for a, b in zip(torch_steps(grouped, ids, [4, 1]), torch_steps(dense, ids, [4, 1])):
        assert rel(a, b) < 1e-6


def test_router_matches_transformers(hf_moe):
    """Our route() against transformers' Qwen3MoeTopKRouter: the same experts (inputs without ties
    at the k-th place) and the same weights to float32 rounding. Not bitwise: the Router op sums its
    softmax in its own fixed order (docs/ops.md, "Router"), torch's softmax in its kernel's; the
    weights are bitwise the op's CPU reference on the gate's logits."""
    from metrale_export.ops import router as router_ref

    hf, path = hf_moe
    moe = reference_model(path, QuantRequest()).model.layers["0"].mlp
    x = torch.randn(257, 64, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logits, w_hf, id_hf = hf.model.layers[0].mlp.gate(x)
        ids, w = moe.route(x)
    assert ids.dtype == torch.int32
    assert torch.equal(ids.to(torch.int64), id_hf)
    torch.testing.assert_close(w, w_hf, rtol=4e-7, atol=0)
    ref_ids, ref_w = router_ref.route(logits, moe.top_k, int(moe.norm_topk_prob))
    assert torch.equal(ids, ref_ids) and torch.equal(w, ref_w)


def test_top_k_ties_take_the_lower_expert_id():
    """docs/ops.md: among equal probabilities the lower expert id wins, as ONNX TopK defines (and
    ONNX Runtime runs); torch.topk leaves the choice unspecified."""
    from metrale_export.exporter.layers.moe import topk_lower_id

    probs = torch.tensor([[0.1, 0.3, 0.3, 0.3, 0.0, 0.3], [0.25, 0.25, 0.25, 0.25, 0.0, 0.0]])
    vals, idx = topk_lower_id(probs, 2)
    assert idx.tolist() == [[1, 2], [0, 1]]
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("TopK", ["p", "k"], ["v", "i"], axis=-1)], "topk",
        [onnx.helper.make_tensor_value_info("p", onnx.TensorProto.FLOAT, [2, 6])],
        [onnx.helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [2, 2]),
         onnx.helper.make_tensor_value_info("i", onnx.TensorProto.INT64, [2, 2])],
        [onnx.numpy_helper.from_array(np.array([2], dtype=np.int64), "k")])
    import onnxruntime as ort
    sess = ort.InferenceSession(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20)])
                                .SerializeToString(), providers=["CPUExecutionProvider"])
    assert sess.run(["i"], {"p": probs.numpy()})[0].tolist() == idx.tolist()


def test_512_experts_export_as_a_handful_of_nodes(tmp_path):
    """Qwen3-Next's expert count: one sparse layer is 2 grouped nodes (gate|up, down), not 3 x 512."""
    save_random(tiny_config(num_experts=512, num_experts_per_tok=10, num_hidden_layers=1, mlp_only_layers=[],
                            moe_intermediate_size=16), tmp_path / "hf")
    out = export(tmp_path / "hf", tmp_path / "o", ExportOptions(request=QuantRequest(weight="w8a8"))).out_dir
    ops = _projection_nodes(out, attention_layers=1, sparse_layers=1)
    assert sorted(n.op_type for n in ops) == ["W8A8MoEProj"] * 2 + ["W8A8Proj"] * 2  # gate_up, down; qkv, o
    down = next(n for n in ops if n.op_type == "W8A8MoEProj" and _attr(n, "combine") == 1)
    assert (_attr(down, "num_experts"), _attr(down, "top_k")) == (512, 10)
