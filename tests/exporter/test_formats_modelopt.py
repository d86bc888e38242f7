"""ModelOpt Hugging Face exports written by ModelOpt itself (``mtq.quantize`` +
``export_hf_checkpoint`` on a tiny Qwen3): the stored NVFP4/FP8 tensors pass through unchanged, the
dequantized weights match ModelOpt's own dequantization, and ONNX Runtime matches PyTorch."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("modelopt.torch.quantization", reason="nvidia-modelopt is a test dependency (pip install nvidia-modelopt requests)")

from safetensors.torch import load_file  # noqa: E402

from metrale_export import contract  # noqa: E402
from metrale_export.exporter.formats import ModelOptSource  # noqa: E402
from support import checkpoints as T  # noqa: E402


@pytest.fixture(scope="module")
def mo_checkpoints(tmp_path_factory):
    base = tmp_path_factory.mktemp("modelopt")
    return {algo: T.write_modelopt(base / algo, algo) for algo in ("NVFP4", "FP8")}


def test_nvfp4_is_declared_with_static_input_scale(mo_checkpoints):
    d = mo_checkpoints["NVFP4"]
    assert json.loads((d / "hf_quant_config.json").read_text())["quantization"]["quant_algo"] == "NVFP4"
    src = T.source_for(d)
    assert isinstance(src, ModelOptSource)
    spec = src.spec("model.layers.1.self_attn.q_proj", 256, 256, "attn")
    assert spec.kind == "w4a4" and spec.attrs["activation_format"] == "nvfp4"
    assert list(spec.tensors) == ["weight", "weight_scale", "weight_global_scale", "input_scale"]
    assert src.spec("lm_head", 512, 256, "head").kind == "none"  # exclude_modules


def test_nvfp4_operands_pass_through_and_dequantize_like_modelopt(mo_checkpoints):
    from modelopt.torch.quantization.qtensor import NVFP4QTensor

    d = mo_checkpoints["NVFP4"]
    sd = load_file(str(d / "model.safetensors"))
    src = T.source_for(d)
    mismatched = total = 0
    for name in T.projection_names():
        w = sd[f"{name}.weight"]
        n, k = w.shape[0], w.shape[1] * 2
        t = src.load(src.spec(name, n, k, "ffn"))
        assert torch.equal(t["weight"].view(torch.uint8), w)
        assert torch.equal(t["weight_scale"].view(torch.uint8), sd[f"{name}.weight_scale"].view(torch.uint8))
        assert torch.equal(t["weight_global_scale"], sd[f"{name}.weight_scale_2"].reshape(1))
        assert torch.equal(t["input_scale"], sd[f"{name}.input_scale"].reshape(1))
        ref = NVFP4QTensor(torch.Size([n, k]), torch.float32, w).dequantize(
            dtype=torch.float32, scale=sd[f"{name}.weight_scale"], double_scale=sd[f"{name}.weight_scale_2"],
            block_sizes={-1: 16})
        ours = T.contract_weight(src, name, n, k)
        # ModelOpt multiplies e2m1 * (s * gw); the contract (e2m1 * s) * gw: equal up to one float32
        # rounding (docs/formats.md); bit-identical whenever the e2m1 value is a power of two.
        rel = ((ours - ref).abs() / ref.abs().clamp_min(1e-30))[ref != 0]
        assert float(rel.max()) <= 2.0 ** -23, name
        mismatched += int((ours != ref).sum())
        total += ref.numel()
    assert mismatched < total * 0.25


def test_fp8_per_tensor_scale_broadcasts_exactly(mo_checkpoints):
    from modelopt.torch.quantization.qtensor import FP8QTensor

    d = mo_checkpoints["FP8"]
    sd = load_file(str(d / "model.safetensors"))
    src = T.source_for(d)
    assert src.describe()["activation_format"] == "fp8"
    for name in T.projection_names():
        w = sd[f"{name}.weight"]
        n, k = w.shape
        spec = src.spec(name, n, k, "ffn")
        assert spec.attrs["weight_scale_granularity"] == "channel"
        assert spec.attrs["activation_scale_granularity"] == "row"
        ref = FP8QTensor(torch.Size([n, k]), torch.float32, w).dequantize(dtype=torch.float32, scale=sd[f"{name}.weight_scale"])
        assert torch.equal(T.contract_weight(src, name, n, k), ref), name


# FP8's weights are checked against ModelOpt's own dequantization above and its channel/row W8A8 op
# runs end to end with the demo's w8a8 export: the default suite leaves it to make test-all.
@pytest.mark.parametrize("algo", ["NVFP4", pytest.param("FP8", marks=pytest.mark.slow)])
def test_export_matches_pytorch_reference(mo_checkpoints, tmp_path, algo):
    result, report = T.export_and_compare(mo_checkpoints[algo], tmp_path / "out")
    ops = [o for o in result.manifest["ops"] if o["op_type"] in contract.projections()]
    assert [o["op_type"] for o in result.manifest["ops"]].count("Attention") == T.TINY["num_hidden_layers"]
    assert len(ops) == 8 and {o["op_type"] for o in ops} == {"W4A4Proj" if algo == "NVFP4" else "W8A8Proj"}
    if algo == "NVFP4":
        assert all(o["has_input_scale"] == 1 for o in ops)
    assert report.ok, [(r.case, r.output, r.rel_error) for r in report.rows if not r.ok]
