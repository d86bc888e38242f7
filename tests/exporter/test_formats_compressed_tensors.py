"""compressed-tensors checkpoints written by compressed-tensors itself: the declared formats survive
export unchanged, the dequantized weights equal the library's own decompression, and ONNX Runtime
matches the PyTorch reference of the same checkpoint."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("compressed_tensors", reason="compressed-tensors is a test dependency (pip install compressed-tensors)")

from metrale_export import contract  # noqa: E402
from metrale_export.errors import InputError  # noqa: E402
from metrale_export.exporter.formats import CompressedTensorsSource  # noqa: E402
from support import checkpoints as T  # noqa: E402

# scheme -> (contract kind, contract attributes every quantized projection must carry)
SCHEMES = {
    "W4A16": ("w4a16", {"group_size": 128, "activation_format": "bf16"}),
    "W4A16_ASYM": ("w4a16", {"group_size": 128, "activation_format": "bf16"}),
    "FP8_DYNAMIC": ("w8a8", {"weight_scale_granularity": "channel", "activation_format": "fp8",
                             "activation_scale_granularity": "row"}),
    "FP8_TENSOR_TOKEN": ("w8a8", {"weight_scale_granularity": "channel", "activation_format": "fp8",
                                  "activation_scale_granularity": "row"}),
    "FP8_BLOCK": ("w8a8", {"weight_scale_granularity": "block128", "activation_format": "fp8",
                           "activation_scale_granularity": "row_block128"}),
    "FP8_BLOCK_A16": ("w8a8", {"weight_scale_granularity": "block128", "activation_format": "bf16"}),
    "FP8": ("w8a8", {"weight_scale_granularity": "channel", "activation_format": "fp8",
                     "activation_scale_granularity": "row"}),
    "NVFP4": ("w4a4", {"activation_format": "nvfp4"}),
    "NVFP4A16": ("w4a4", {"activation_format": "bf16"}),
}


@pytest.fixture(scope="module")
def ct_checkpoints(tmp_path_factory):
    base = tmp_path_factory.mktemp("ct")
    out = {s: T.write_compressed_tensors(base / s, s) for s in SCHEMES}
    out["W4A16_ASYM_G32"] = T.write_compressed_tensors(base / "g32", "W4A16_ASYM", group_size=32)
    out["W4A16_G64"] = T.write_compressed_tensors(base / "g64", "W4A16", group_size=64)
    return out


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_declared_spec_keeps_the_stored_format(ct_checkpoints, scheme):
    kind, attrs = SCHEMES[scheme]
    src = T.source_for(ct_checkpoints[scheme])
    assert isinstance(src, CompressedTensorsSource)
    spec = src.spec("model.layers.0.mlp.down_proj", 256, 512, "ffn")
    assert spec.kind == kind
    for key, value in attrs.items():
        assert spec.attrs[key] == value, key
    assert ("zero_point" in spec.tensors) == scheme.startswith("W4A16_ASYM")
    assert ("input_scale" in spec.tensors) == (scheme == "NVFP4")
    # lm_head is in the ignore list: it stays float, tensor by tensor
    assert src.spec("lm_head", 512, 256, "head").kind == "none"
    assert src.describe()["weight_format"] == kind


@pytest.mark.parametrize("scheme", ["W4A16", "W4A16_ASYM", "W4A16_ASYM_G32", "W4A16_G64", "FP8_DYNAMIC",
                                    "FP8_TENSOR_TOKEN", "FP8_BLOCK", "FP8"])
def test_dequantized_weights_equal_the_library_bit_for_bit(ct_checkpoints, scheme):
    """int4 and FP8: (code - z) * s and fp8 * s are exact in float32, and the library's bf16 result
    is that product rounded once, so the contract's bf16 weight equals it bit for bit."""
    ckpt = ct_checkpoints[scheme]
    ref = T.ct_decompressed_weights(ckpt)
    src = T.source_for(ckpt)
    for name, w_ref in ref.items():
        n, k = w_ref.shape
        ours = T.contract_weight(src, name, n, k)
        assert w_ref.dtype == torch.bfloat16
        assert torch.equal(ours.to(torch.bfloat16).view(torch.int16), w_ref.view(torch.int16)), name


@pytest.mark.parametrize("scheme", ["NVFP4", "NVFP4A16"])
def test_nvfp4_operands_identical_and_weights_within_one_bf16_ulp(ct_checkpoints, scheme):
    """compressed-tensors computes q * (s / G); the contract (e2m1 * s) * gw with gw = 1 / G. The
    stored codes and e4m3 scales pass through bit for bit; the two products differ by float32
    rounding order, so a few bf16 weights land one ulp apart (docs/formats.md)."""
    from safetensors.torch import load_file

    ckpt = ct_checkpoints[scheme]
    sd = load_file(str(ckpt / "model.safetensors"))
    ref = T.ct_decompressed_weights(ckpt)
    src = T.source_for(ckpt)
    mismatched = total = 0
    for name, w_ref in ref.items():
        n, k = w_ref.shape
        t = src.load(src.spec(name, n, k, "ffn"))
        assert torch.equal(t["weight"].view(torch.uint8), sd[f"{name}.weight_packed"])
        assert torch.equal(t["weight_scale"].view(torch.uint8), sd[f"{name}.weight_scale"].view(torch.uint8))
        assert torch.equal(t["weight_global_scale"], 1.0 / sd[f"{name}.weight_global_scale"].float())  # float32 division
        ours = T.contract_weight(src, name, n, k).to(torch.bfloat16)
        ulps = (ours.view(torch.int16).to(torch.int32) - w_ref.view(torch.int16).to(torch.int32)).abs()
        assert int(ulps.max()) <= 1, name
        mismatched += int((ulps > 0).sum())
        total += ulps.numel()
    assert mismatched < total * 0.01


# One export per weight format family (each export traces a model: keep the count small). The
# default suite keeps the two whose activation paths no other end-to-end test runs (row_block128
# scales, NVFP4 with input scales); asym int4 runs end to end with AWQ, channel/row FP8 with the
# demo's w8a8 export, and these readers' weights are checked against the library's own
# decompression above, so the other two only repeat that coverage (make test-all runs them).
@pytest.mark.parametrize("scheme", [pytest.param("W4A16_ASYM_G32", marks=pytest.mark.slow),
                                    pytest.param("FP8_DYNAMIC", marks=pytest.mark.slow), "FP8_BLOCK", "NVFP4"])
def test_export_matches_pytorch_reference(ct_checkpoints, tmp_path, scheme):
    result, report = T.export_and_compare(ct_checkpoints[scheme], tmp_path / "out")
    ops = result.manifest["ops"]
    projections = [op for op in ops if op["op_type"] in contract.projections()]
    kinds = {op["op_type"] for op in projections}
    assert kinds == {{"W4A16_ASYM_G32": "W4A16Proj", "FP8_DYNAMIC": "W8A8Proj", "FP8_BLOCK": "W8A8Proj",
                      "NVFP4": "W4A4Proj"}[scheme]}
    # qkv, o, gate_up, down per layer (fused), lm_head float (ignore list). NVFP4: this generator
    # calibrates each module's global scale alone (llm-compressor gives q|k|v and gate|up one:
    # update_fused_layer_weight_global_scales), so the parts differ and stay one op each.
    assert len(projections) == (14 if scheme == "NVFP4" else 8)
    apart = result.manifest.get("fusion", {}).get("kept_apart", {})
    layers = T.TINY["num_hidden_layers"]
    assert sorted(apart) == (sorted(f"model.layers.{i}.{g}" for i in range(layers)
                                    for g in ("self_attn.qkv_proj", "mlp.gate_up_proj")) if scheme == "NVFP4" else [])
    assert all("different weight_global_scale" in r for r in apart.values())
    assert [op["op_type"] for op in ops if op["name"] == "lm_head"] == ["FloatProj"]
    assert [op["op_type"] for op in ops].count("Attention") == T.TINY["num_hidden_layers"]
    assert report.ok, [(r.case, r.output, r.rel_error) for r in report.rows if not r.ok]


def test_request_the_checkpoint_cannot_honour_is_refused(ct_checkpoints):
    with pytest.raises(InputError, match=r"already quantized.*w4a16.*declared"):
        T.source_for(ct_checkpoints["W4A16"], weight="w4a4")
    with pytest.raises(InputError, match="already quantized"):
        T.source_for(ct_checkpoints["W4A16"], weight="none")
    # asking for the format the checkpoint stores is the same as declared
    assert T.source_for(ct_checkpoints["NVFP4"], weight="w4a4").kind == "w4a4"


def test_activation_declared_static_fp8_maps_to_dynamic_rows(ct_checkpoints):
    d = T.source_for(ct_checkpoints["FP8"]).describe()
    assert d["activation_format"] == "fp8" and "replaced by dynamic per-row" in d["activation"]
    bf16_src = T.source_for(ct_checkpoints["FP8_BLOCK_A16"])
    assert bf16_src.describe()["activation_format"] == "bf16"



def test_ignore_list_keeps_projections_float_tensor_by_tensor(tmp_path):
    d = T.write_compressed_tensors(tmp_path / "mixed", "W4A16", ignore=("lm_head", "re:.*mlp.down_proj"))
    src = T.source_for(d)
    assert src.spec("model.layers.0.mlp.down_proj", 256, 512, "ffn").kind == "none"
    assert src.spec("model.layers.0.mlp.up_proj", 512, 256, "ffn").kind == "w4a16"
    t = src.load(src.spec("model.layers.1.mlp.down_proj", 256, 512, "ffn"))
    assert t["weight"].dtype.is_floating_point and t["weight"].shape == (256, 512)


def test_config_and_tensors_disagreeing_is_a_checkpoint_error(tmp_path):
    import json

    from metrale_export.errors import CheckpointError

    d = T.write_compressed_tensors(tmp_path / "ct", "W4A16")
    cfg = json.loads((d / "config.json").read_text())
    cfg["quantization_config"]["ignore"] = ["lm_head", "re:.*q_proj"]
    (d / "config.json").write_text(json.dumps(cfg))
    src = T.source_for(d)
    with pytest.raises(CheckpointError, match=r"q_proj: quantization_config does not target this module but the checkpoint stores"):
        src.spec("model.layers.0.self_attn.q_proj", 256, 256, "attn")
