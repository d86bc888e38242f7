"""Fused projections (exporter/fusion.py, docs/layers.md "Fused projections"): q|k|v and gate|up
as one op each, from float weights (quantized as one weight) and from a declared format (the
stored parts concatenated, when they share a format and per-tensor scalars), with the unfused
export one flag away and older manifests read as unfused."""

from __future__ import annotations

import dataclasses
import json

import onnx
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from metrale_export.cli.main import cli

from metrale_export.exporter import fusion
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.projection import ProjSpec
from metrale_export.exporter.quant_options import request_fields_from_manifest
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.exporter.demo import DEMO_CONFIG
from metrale_export.ops import w4a4
from tests.support.checkpoints import TINY, source_for, write_modelopt, write_small_demo

ATTN, MLP = "model.layers.0.self_attn", "model.layers.0.mlp"


def _dims(cfg: dict) -> tuple[int, int, int, int]:
    """(hidden, q rows, k and v rows, intermediate) of a Qwen3 config."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    return (cfg["hidden_size"], cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd,
            cfg["intermediate_size"])


H, QN, KVN, INTER = _dims(DEMO_CONFIG)


def _proj_ops(onnx_path) -> dict[str, dict]:
    graph = onnx.load(onnx_path, load_external_data=False).graph
    out = {}
    for node in graph.node:
        if node.domain == "metrale" and node.op_type.endswith("Proj"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            out[attrs["name"].decode()] = attrs
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return write_small_demo(tmp_path_factory.mktemp("fusion"))


@pytest.mark.parametrize("weight", ["w4a16", "none"])
def test_export_fuses_qkv_and_gate_up_and_the_flag_keeps_them_apart(small, tmp_path, weight):
    fused = export(small, tmp_path / "fused", ExportOptions(request=QuantRequest(weight=weight)))
    apart = export(small, tmp_path / "apart", ExportOptions(request=QuantRequest(weight=weight, fuse_projections=False)))
    if weight == "none":  # float projections are MatMuls: the initializers name the fused weights
        names = {i.name for i in onnx.load(fused.out_dir / "model.onnx", load_external_data=False).graph.initializer}
        assert any("qkv_proj" in n for n in names) and not any(".q_proj" in n for n in names)
        return
    ops = _proj_ops(fused.out_dir / "model.onnx")
    assert ops[f"{ATTN}.qkv_proj"]["n"] == QN + 2 * KVN and ops[f"{ATTN}.qkv_proj"]["k"] == H
    assert ops[f"{MLP}.gate_up_proj"]["n"] == 2 * INTER
    assert not any(n.endswith((".q_proj", ".k_proj", ".v_proj", ".gate_proj", ".up_proj")) for n in ops)
    unfused = _proj_ops(apart.out_dir / "model.onnx")
    assert {f"{ATTN}.q_proj", f"{ATTN}.k_proj", f"{ATTN}.v_proj", f"{MLP}.gate_proj", f"{MLP}.up_proj"} <= set(unfused)
    assert not any("qkv_proj" in n or "gate_up_proj" in n for n in unfused)
    manifest = json.loads((apart.out_dir / "manifest.json").read_text())
    assert manifest["weight_quantization"]["fuse_projections"] is False
    assert "fusion" not in manifest and "fusion" not in fused.manifest  # nothing kept apart


def _fused_and_parts(source, cfg=DEMO_CONFIG):
    h, qn, kvn, _ = _dims(cfg)
    parts = ((f"{ATTN}.q_proj", qn), (f"{ATTN}.k_proj", kvn), (f"{ATTN}.v_proj", kvn))
    fused = source.spec(f"{ATTN}.qkv_proj", qn + 2 * kvn, h, "attn", parts=parts)
    return fused, [source.spec(p, n, h, "attn") for p, n in parts]


@pytest.mark.parametrize("request_kw", [dict(weight="w4a16"), dict(weight="w4a16", symmetric=True),
                                        dict(weight="w8a8"), dict(weight="w8a8", w8a8_weight_scales="block128")])
def test_row_local_formats_fuse_to_exactly_the_parts_tensors(small, request_kw):
    """W4A16 group scales and W8A8 channel scales are per row; W8A8 block128 with parts of whole
    128-row blocks: the fused tensors are the parts', concatenated."""
    source = FloatSource(Checkpoint.open(small), QuantRequest(**request_kw))
    fused, parts = _fused_and_parts(source)
    assert fused.parts == tuple((p.name, p.n) for p in parts)
    got = source.load(fused)
    loaded = [source.load(p) for p in parts]
    assert set(got) == set(loaded[0])
    for key in got:
        assert torch.equal(got[key], torch.cat([t[key] for t in loaded])), key


def test_w4a4_fuses_with_one_global_scale_for_the_group(small):
    source = FloatSource(Checkpoint.open(small), QuantRequest(weight="w4a4"))
    fused, parts = _fused_and_parts(source)
    got = source.load(fused)
    ckpt = Checkpoint.open(small)
    whole = torch.cat([ckpt.get(f"{p.name}.weight") for p in parts]).to(torch.float32)
    want = w4a4.quantize(whole, search=True)
    assert torch.equal(got["weight_global_scale"], want.weight_global_scale)
    assert torch.equal(got["weight"], want.weight) and torch.equal(got["weight_scale"], want.weight_scale)
    globals_ = [source.load(p)["weight_global_scale"] for p in parts]
    assert any(not torch.equal(g, got["weight_global_scale"]) for g in globals_)  # what fusing changes


@pytest.fixture(scope="module")
def modelopt_nvfp4(tmp_path_factory):
    pytest.importorskip("modelopt")
    return write_modelopt(tmp_path_factory.mktemp("mo") / "nvfp4", "NVFP4")


def test_modelopt_nvfp4_parts_concatenate_as_stored(modelopt_nvfp4):
    """ModelOpt writes one weight_scale_2 and input_scale for q|k|v and for gate|up (checked here on
    its own export), so the stored parts become one op with exactly their tensors."""
    source = source_for(modelopt_nvfp4)
    fused, parts = _fused_and_parts(source, TINY)
    assert fused.kind == "w4a4" and "input_scale" in fused.tensors
    got = source.load(fused)
    loaded = [source.load(p) for p in parts]
    for key in ("weight", "weight_scale"):
        assert torch.equal(got[key], torch.cat([t[key] for t in loaded]))
    for key in fusion.SCALARS:
        assert all(torch.equal(got[key], t[key]) for t in loaded)


def test_declared_parts_with_different_scalars_stay_apart(modelopt_nvfp4, tmp_path):
    ckpt = tmp_path / "mo"
    ckpt.mkdir()
    for f in modelopt_nvfp4.iterdir():
        if f.is_file():
            (ckpt / f.name).write_bytes(f.read_bytes())
    sd = load_file(str(ckpt / "model.safetensors"))
    sd[f"{ATTN}.k_proj.weight_scale_2"] = sd[f"{ATTN}.k_proj.weight_scale_2"] * 2
    save_file(sd, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    source = source_for(ckpt)
    with pytest.raises(fusion.Unfusable, match="different weight_global_scale"):
        _fused_and_parts(source, TINY)
    h, qn, kvn, _ = _dims(TINY)
    specs = fusion.plan(source, ATTN, fusion.QKV, (qn, kvn, kvn), h, "attn")
    assert sorted(specs) == ["k_proj", "q_proj", "v_proj"]
    result = export(ckpt, tmp_path / "out", ExportOptions(request=QuantRequest(weight="declared")))
    ops = _proj_ops(result.out_dir / "model.onnx")
    assert f"{ATTN}.k_proj" in ops and f"model.layers.1.self_attn.qkv_proj" in ops  # only layer 0 differs
    apart = result.manifest["fusion"]["kept_apart"]
    assert list(apart) == [f"{ATTN}.qkv_proj"] and "different weight_global_scale" in apart[f"{ATTN}.qkv_proj"]
    shown = CliRunner().invoke(cli, ["inspect", str(result.out_dir)])
    assert shown.exit_code == 0 and "kept apart: 1 fused group(s)" in shown.output, shown.output


def _spec(name, n, kind="w8a8", gran="block128", k=256):
    tensors = {"weight": ((n, k), torch.int8), "weight_scale": (((n + 127) // 128, (k + 127) // 128), torch.float32)}
    return ProjSpec(name=name, kind=kind, n=n, k=k, family="attn", tensors=tensors,
                    attrs={"weight_scale_granularity": gran}, source=f"{name}.weight")


def test_combine_refuses_straddling_blocks_and_mixed_formats():
    fused = fusion.combine("x.qkv_proj", [_spec("x.q_proj", 256), _spec("x.k_proj", 128), _spec("x.v_proj", 64)])
    assert fused.n == 448 and fused.tensors["weight_scale"][0] == (4, 2)  # the last part may end mid-block
    with pytest.raises(fusion.Unfusable, match="x.k_proj has 128-row weight blocks but not a multiple"):
        fusion.combine("x.qkv_proj", [_spec("x.q_proj", 256), _spec("x.k_proj", 64), _spec("x.v_proj", 64)])
    other = dataclasses.replace(_spec("x.k_proj", 128), attrs={"weight_scale_granularity": "channel"})
    with pytest.raises(fusion.Unfusable, match="x.k_proj is w8a8"):
        fusion.combine("x.qkv_proj", [_spec("x.q_proj", 256), other])


def test_a_manifest_without_the_key_is_an_unfused_export():
    assert request_fields_from_manifest({"format": "w4a16"})["fuse_projections"] is False
    assert request_fields_from_manifest({"format": "w4a16", "fuse_projections": True})["fuse_projections"] is True
    assert QuantRequest().fuse_projections is True
