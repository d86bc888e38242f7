"""Export of the demo model in every format: graph validity, the op contract's attributes,
determinism, ONNX Runtime vs PyTorch, and the quantization error bounds."""

from pathlib import Path

import json

import numpy as np
import onnx
import pytest
import torch

from metrale_export.compare.accuracy import Case, compare_export
from metrale_export.exporter import writer
from metrale_export import contract
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.config import parse_config
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.layers.model import CausalLM
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.ops import onnx_translation, tolerances
from metrale_export.ops.ort import reference_session

FORMATS = ("w4a16", "w8a8", "w4a4")


def test_graph_is_valid_and_every_op_carries_the_contract(demo_exports):
    for fmt, d in demo_exports.items():
        model = onnx.load(str(d / "model.onnx"))
        onnx.checker.check_model(model)
        ops = [n for n in model.graph.node if n.domain == contract.DOMAIN]
        projections = [n for n in ops if n.op_type in contract.projections()]
        assert len(projections) == (0 if fmt == "none" else 8), fmt  # qkv, o, gate_up, down a layer
        assert sum(n.op_type == "Attention" for n in ops) == 2, fmt  # every format: one per layer
        assert {n.op_type for n in ops} - set(contract.projections()) <= {"Attention", "RMSNorm", "FloatProj"}, fmt
        # per layer input, q, k and post-attention norms, and the final norm
        assert sum(n.op_type == "RMSNorm" for n in ops) == 2 * 4 + 1, fmt
        for node in ops:
            names = {a.name for a in node.attribute}
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            spec = contract.op(node.op_type)
            # plugin_version only where the node's own version needs it (contract.node_version)
            text = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
            assert names == set(spec.emitted_attributes) | (
                {"plugin_version"} if contract.names_plugin_version(spec, text) else set()), node.name
            if node.op_type == "W8A8Proj":  # op version 3: the FP8 tensor core's arithmetic
                assert attrs["plugin_version"] == b"3"
            if node.op_type == "W4A16Proj":  # op version 2: bf16 scales, and the plugin's version
                assert attrs["plugin_version"] == b"2"
                scale = next(t for t in model.graph.initializer if t.name == node.input[2])
                assert scale.data_type == onnx.TensorProto.BFLOAT16, node.name
            if node.op_type in contract.projections():
                present = 3 + (node.op_type == "W4A4Proj") + sum(v for k, v in attrs.items() if k.startswith("has_"))
            else:  # the norms, attention, float projections and router: x and the inputs their gates say
                present = 1 + len(contract.op(node.op_type).present_inputs(attrs))
            assert len(node.input) == present and all(node.input), node.name
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["files"]["model.onnx"] == writer.sha256_file(d / "model.onnx")
        assert [i["name"] for i in manifest["inputs"]][:2] == ["input_ids", "position_ids"]


def test_export_is_deterministic(demo_checkpoint, demo_exports, tmp_path):
    again = export(demo_checkpoint, tmp_path / "again", ExportOptions(request=QuantRequest(weight="w4a16")))
    first = demo_exports["w4a16"]
    assert (again.out_dir / "model.onnx").read_bytes() == (first / "model.onnx").read_bytes()


@pytest.mark.parametrize("fmt", ("none", *FORMATS))
def test_onnxruntime_matches_pytorch(demo_exports, fmt):
    report = compare_export(demo_exports[fmt], cases=(Case("prefill", 2, 5, 0), Case("decode", 3, 1, 6)))
    floor = tolerances.MODEL_UNQUANTIZED if fmt == "none" else tolerances.MODEL_QUANTIZED
    assert report.rows and all(r.tolerance >= floor for r in report.rows)
    assert report.layers and (report.ops or fmt == "none")
    assert report.ok, report.first_failure()


def _logits(ckpt_path, request, ids, pos):
    ckpt = Checkpoint.open(ckpt_path)
    cfg = parse_config(ckpt.config)
    src = FloatSource(ckpt, request)
    model = CausalLM(cfg, src).load_weights(src).eval()
    kv = [torch.zeros(ids.shape[0], cfg.num_key_value_heads, 0, cfg.head_dim) for _ in range(2 * cfg.num_hidden_layers)]
    with torch.no_grad():
        return model(ids, pos, *kv)[0]


@pytest.mark.parametrize("fmt", FORMATS)
def test_quantized_logits_stay_close_to_float(demo_checkpoint, fmt):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 512, (2, 12), generator=g)
    pos = torch.arange(12).expand(2, 12).contiguous()
    ref = _logits(demo_checkpoint, QuantRequest(), ids, pos)
    got = _logits(demo_checkpoint, QuantRequest(weight=fmt), ids, pos)
    err = float((got - ref).norm() / ref.norm())
    assert 0 < err < tolerances.QUANTIZED_VS_FLOAT[fmt]


def test_layer_subset_and_external_data(demo_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setattr(writer, "INLINE_LIMIT", 0)
    import metrale_export.exporter.export as export_mod

    monkeypatch.setattr(export_mod, "INLINE_LIMIT", 0)
    out = export(demo_checkpoint, tmp_path / "one", ExportOptions(request=QuantRequest(weight="w8a8"), layers=[1])).out_dir
    assert (out / writer.DATA_NAME).exists()
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert [i.name for i in model.graph.input] == ["input_ids", "position_ids", "past_key.1", "past_value.1"]
    assert all(i.data_location == onnx.TensorProto.EXTERNAL for i in model.graph.initializer
               if i.name.startswith("model.layers.1.mlp"))
    sess = reference_session(out / "model.onnx")
    feeds = {"input_ids": np.array([[1, 2, 3]]), "position_ids": np.array([[0, 1, 2]]),
             "past_key.1": np.zeros((1, 2, 0, 64), np.float32), "past_value.1": np.zeros((1, 2, 0, 64), np.float32)}
    logits = sess.run(["logits"], feeds)[0]
    assert logits.shape == (1, 3, 512) and np.isfinite(logits).all()


@pytest.mark.parametrize("fmt", ("none", "w4a16"))
def test_tied_embeddings_share_one_initializer_with_a_float_lm_head(tmp_path, fmt):
    from safetensors.torch import save_file

    from metrale_export.exporter import demo

    cfg = dict(demo.DEMO_CONFIG, tie_word_embeddings=True)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg))
    save_file(demo.demo_tensors(cfg), str(tmp_path / "ckpt" / "model.safetensors"), metadata={"format": "pt"})
    out = export(tmp_path / "ckpt", tmp_path / "out", ExportOptions(request=QuantRequest(weight=fmt))).out_dir
    model = onnx.load(str(out / "model.onnx"))
    names = [i.name for i in model.graph.initializer]
    readers = [n.op_type for n in model.graph.node if "model.embed_tokens.weight" in n.input]
    assert names.count("model.embed_tokens.weight") == 1
    if fmt == "none":
        assert "lm_head.weight" not in names
        assert len(readers) == 2, readers  # the embedding's Gather and lm_head's matmul
    else:
        # a quantized export's float lm_head is the FloatProj op, whose weight is bf16 (rounded
        # once): its own initializer, the tied embedding rounded to bf16
        init = {i.name: i for i in model.graph.initializer}
        head = [n for n in model.graph.node if n.op_type == "FloatProj" and "lm_head.weight" in n.input]
        assert len(head) == 1 and readers == ["Gather"], readers
        assert init["lm_head.weight"].data_type == onnx.TensorProto.BFLOAT16
        emb = torch.from_numpy(onnx.numpy_helper.to_array(init["model.embed_tokens.weight"]).astype(np.float32))
        bits = onnx.numpy_helper.to_array(init["lm_head.weight"])
        head_w = torch.from_numpy(np.asarray(bits).view(np.uint16).astype(np.int32)).to(torch.int32)
        assert torch.equal(head_w, emb.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF)
    report = compare_export(out, cases=(Case("prefill", 2, 5, 0), Case("decode", 3, 1, 6)))
    assert report.ok, [(r.case, r.output, r.rel_error) for r in report.rows if not r.ok]

    quantized = export(tmp_path / "ckpt", tmp_path / "q", ExportOptions(
        request=QuantRequest(weight="w4a16", quantize_lm_head=True))).out_dir
    assert "lm_head.weight" in {i.name for i in onnx.load(str(quantized / "model.onnx")).graph.initializer}
