"""GPTQ, AWQ and FP8-block (``weight_scale_inv``) checkpoints made by generators that follow the
published layouts (their libraries do not install on a CPU-only machine). The dequantized weights
are checked against transcriptions of the libraries' own reference dequantizers (AutoGPTQ's torch
path, AutoAWQ's ``dequantize_gemm``, DeepSeek-V3's ``weight_dequant``), and every format exports and
matches the PyTorch reference in ONNX Runtime."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from metrale_export import contract
from metrale_export.errors import CheckpointError, InputError
from metrale_export.exporter.formats import AwqSource, Fp8BlockSource, GptqSource
from metrale_export.ops.w4a16 import store_scale
from support import checkpoints as T


# --- the libraries' reference dequantizers, transcribed ---------------------------------------------

def autogptq_dequant(qweight, qzeros, scales, g_idx, v1=True):
    """AutoGPTQ qlinear_cuda_old's torch path (4-bit): returns [K, N] in the scales' dtype."""
    bits = 4
    wf = torch.tensor(list(range(0, 32, bits)), dtype=torch.int32).unsqueeze(0)
    zeros = torch.bitwise_right_shift(torch.unsqueeze(qzeros, 2).expand(-1, -1, 32 // bits), wf.unsqueeze(0)).to(torch.int8)
    zeros = torch.bitwise_and(zeros, (2 ** bits) - 1)
    if v1:
        zeros = zeros + 1
    zeros = zeros.reshape(zeros.shape[0], -1)
    weight = torch.bitwise_right_shift(torch.unsqueeze(qweight, 1).expand(-1, 32 // bits, -1), wf.unsqueeze(-1)).to(torch.int8)
    weight = torch.bitwise_and(weight, (2 ** bits) - 1)
    weight = weight.reshape(weight.shape[0] * weight.shape[1], weight.shape[2])
    return scales[g_idx.long()] * (weight - zeros[g_idx.long()])


AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def autoawq_dequantize_gemm(qweight, qzeros, scales, group_size, bits=4):
    """AutoAWQ awq/utils/packing_utils.py dequantize_gemm: returns [K, N] fp16."""
    shifts = torch.arange(0, 32, bits)
    iweights = torch.bitwise_right_shift(qweight[:, :, None], shifts[None, None, :]).to(torch.int8)
    iweights = iweights.view(iweights.shape[0], -1)
    izeros = torch.bitwise_right_shift(qzeros[:, :, None], shifts[None, None, :]).to(torch.int8)
    izeros = izeros.view(izeros.shape[0], -1)
    order = torch.arange(iweights.shape[-1], dtype=torch.int32).view(-1, 32 // bits)[:, AWQ_REVERSE_ORDER].view(-1)
    iweights, izeros = iweights[:, order], izeros[:, order]
    iweights = torch.bitwise_and(iweights, (2 ** bits) - 1)
    izeros = torch.bitwise_and(izeros, (2 ** bits) - 1)
    scales = scales.repeat_interleave(group_size, dim=0)
    izeros = izeros.repeat_interleave(group_size, dim=0)
    return (iweights - izeros) * scales


def deepseek_weight_dequant(weight, scale_inv, block=128):
    """DeepSeek-V3 inference/kernel.py weight_dequant, in torch: y = x * s per 128x128 block."""
    n, k = weight.shape
    s = scale_inv.repeat_interleave(block, 0).repeat_interleave(block, 1)[:n, :k]
    return weight.to(torch.float32) * s


def assert_bf16_scale_rounding(ours, library_fp16, scales_rounded_ref, name):
    """W4A16Proj stores group scales in bfloat16 (op version 2): the export equals the library's
    dequantizer run in float32 with the scales rounded once to bf16, bit for bit, and differs from
    the library's own fp16 weights by at most that rounding (2^-8 relative) plus fp16's (2^-11)."""
    assert torch.equal(ours, scales_rounded_ref), name
    lib = library_fp16.float()
    assert ((ours - lib).abs() <= lib.abs() * (2**-8 + 2**-11)).all(), name


# --- checkpoints -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    b = tmp_path_factory.mktemp("gen")
    return {
        "gptq": T.write_gptq(b / "gptq"),
        "gptq_sym_v2_g64": T.write_gptq(b / "gptq2", sym=True, checkpoint_format="gptq_v2", group_size=64),
        "gptq_actorder": T.write_gptq(b / "gptq_ao", act_order=True),
        "awq": T.write_awq(b / "awq"),
        "awq_g32": T.write_awq(b / "awq32", group_size=32),
        "fp8_block": T.write_fp8_block(b / "fp8b"),
    }


def _tensors_and_source(d, source_type):
    """A generated checkpoint's tensors and the weight source the exporter reads it through, which
    must be a ``source_type``."""
    src = T.source_for(d)
    assert isinstance(src, source_type)
    return load_file(str(d / "model.safetensors")), src


@pytest.mark.parametrize("which", ["gptq", "gptq_sym_v2_g64"])
def test_gptq_dequantizes_like_autogptq(ckpts, which):
    sd, src = _tensors_and_source(ckpts[which], GptqSource)
    for name in T.projection_names():
        ref = autogptq_dequant(sd[f"{name}.qweight"], sd[f"{name}.qzeros"], sd[f"{name}.scales"],
                               sd[f"{name}.g_idx"], v1=which == "gptq")
        k, n = ref.shape
        spec = src.spec(name, n, k, "ffn")
        assert ("zero_point" in spec.tensors) == (which == "gptq")  # sym: no zero points (all 8)
        ours = T.contract_weight(src, name, n, k)
        rounded = autogptq_dequant(sd[f"{name}.qweight"], sd[f"{name}.qzeros"],
                                   store_scale(sd[f"{name}.scales"]).float(), sd[f"{name}.g_idx"],
                                   v1=which == "gptq")  # (q - z) * s is exact in float32
        assert_bf16_scale_rounding(ours.t(), ref, rounded, name)


@pytest.mark.parametrize("which", ["awq", "awq_g32"])
def test_awq_dequantizes_like_autoawq(ckpts, which):
    sd, src = _tensors_and_source(ckpts[which], AwqSource)
    g = 128 if which == "awq" else 32
    for name in T.projection_names():
        ref = autoawq_dequantize_gemm(sd[f"{name}.qweight"], sd[f"{name}.qzeros"], sd[f"{name}.scales"], g)
        k, n = ref.shape
        assert src.spec(name, n, k, "ffn").attrs["group_size"] == g
        rounded = autoawq_dequantize_gemm(sd[f"{name}.qweight"], sd[f"{name}.qzeros"],
                                          store_scale(sd[f"{name}.scales"]).float(), g)
        assert_bf16_scale_rounding(T.contract_weight(src, name, n, k).t(), ref, rounded, name)


def test_fp8_block_dequantizes_like_deepseek(ckpts):
    sd, src = _tensors_and_source(ckpts["fp8_block"], Fp8BlockSource)
    assert src.describe()["activation_format"] == "fp8"
    for name in T.projection_names():
        ref = deepseek_weight_dequant(sd[f"{name}.weight"], sd[f"{name}.weight_scale_inv"])
        n, k = ref.shape
        spec = src.spec(name, n, k, "ffn")
        assert spec.attrs == {"weight_scale_granularity": "block128", "activation_format": "fp8",
                              "activation_scale_granularity": "row_block128"}
        assert torch.equal(T.contract_weight(src, name, n, k), ref), name
    assert src.spec("lm_head", 512, 256, "head").kind == "none"


# fp8_block's weights are checked against the dequantized reference above and its W8A8 block128 op
# runs end to end with compressed-tensors' FP8_BLOCK: the default suite leaves it to make test-all.
@pytest.mark.parametrize("which,op", [("gptq", "W4A16Proj"), ("awq", "W4A16Proj"),
                                      pytest.param("fp8_block", "W8A8Proj", marks=pytest.mark.slow)])
def test_export_matches_pytorch_reference(ckpts, tmp_path, which, op):
    result, report = T.export_and_compare(ckpts[which], tmp_path / "out")
    ops = result.manifest["ops"]
    projections = [o for o in ops if o["op_type"] in contract.projections()]
    assert {o["op_type"] for o in projections} == {op} and len(projections) == 8  # qkv, o, gate_up, down a layer
    assert [o["op_type"] for o in ops].count("Attention") == T.TINY["num_hidden_layers"]
    assert report.ok, [(r.case, r.output, r.rel_error) for r in report.rows if not r.ok]


# --- refusals ----------------------------------------------------------------------------------------

def test_gptq_act_order_is_refused_with_the_reason(ckpts):
    src = T.source_for(ckpts["gptq_actorder"])
    with pytest.raises(InputError, match=r"act-order.*contiguous.*desc_act=false"):
        src.spec("model.layers.0.mlp.up_proj", 512, 256, "ffn")


def test_gptq_v1_zero_of_sixteen_is_refused(ckpts, tmp_path):
    import shutil

    d = tmp_path / "wrapped"
    shutil.copytree(ckpts["gptq"], d)
    sd = load_file(str(d / "model.safetensors"))
    name = "model.layers.0.mlp.up_proj"
    sd[f"{name}.qzeros"][0, 0] = sd[f"{name}.qzeros"][0, 0] | 0xF  # stored 15 -> zero 16
    save_file(sd, str(d / "model.safetensors"))
    src = T.source_for(d)
    with pytest.raises(CheckpointError, match=r"up_proj.qzeros.*is 16.*wrapped"):
        src.load(src.spec(name, 512, 256, "ffn"))


def test_unsupported_variants_are_refused(ckpts, tmp_path):
    import shutil

    for key, change, pattern in [
        ("gptq", {"bits": 8}, "8-bit"),
        ("gptq", {"group_size": -1}, "group_size -1"),
        ("gptq", {"checkpoint_format": "marlin"}, "marlin"),
        ("awq", {"version": "gemv"}, "gemm"),
        ("fp8_block", {"weight_block_size": [64, 64]}, r"\[128, 128\]"),
    ]:
        d = tmp_path / f"{key}-{len(list(tmp_path.iterdir()))}"
        shutil.copytree(ckpts[key], d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["quantization_config"].update(change)
        (d / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(InputError, match=pattern):
            T.source_for(d)


def test_w4a16_request_on_gptq_is_the_declared_format(ckpts):
    assert T.source_for(ckpts["gptq"], weight="w4a16").kind == "w4a16"
    with pytest.raises(InputError, match="already quantized"):
        T.source_for(ckpts["awq"], weight="w8a8")
