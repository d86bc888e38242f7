"""The teacher-forced verification: it finds every layer of an export, holds each op and layer to
its bound, and fails, naming the layer and projection, on an export whose weights were altered."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import numpy_helper
from safetensors.torch import save_file

from metrale_export.cli.main import cli
from metrale_export.compare.accuracy import Case, compare_export
from metrale_export.compare.metrics import kl_divergence, rel_error, top1_agreement
from metrale_export.compare.taps import find_taps
from metrale_export.exporter import demo
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.quantization import QuantRequest
from metrale_export.ops import tolerances
from metrale_export.ops.ort import load_graph

LAYERS, MIDDLE = 5, 2
# Per layer: 4 W4A16 projections (qkv, o, gate_up, down: fused), 4 RMSNorms (input, q, k,
# post-attention with the residual add) and the Attention; after the layers the final norm and
# lm_head (FloatProj).
OPS_PER_LAYER, OPS_AFTER = 9, 2
CASES = (Case("prefill", 2, 5, 0), Case("decode", 2, 1, 4))
CONFIG = dict(demo.DEMO_CONFIG, num_hidden_layers=LAYERS, hidden_size=128, intermediate_size=256,
              num_attention_heads=2, num_key_value_heads=1)


@pytest.fixture(scope="module")
def five_layer_w4a16(tmp_path_factory):
    """A 5-layer demo-shaped checkpoint (hidden 128) exported in W4A16 (weights inline)."""
    base = tmp_path_factory.mktemp("five")
    cfg = CONFIG
    (base / "ckpt").mkdir()
    (base / "ckpt" / "config.json").write_text(json.dumps(cfg))
    save_file(demo.demo_tensors(cfg), str(base / "ckpt" / "model.safetensors"), metadata={"format": "pt"})
    return export(base / "ckpt", base / "w4a16", ExportOptions(request=QuantRequest(weight="w4a16"))).out_dir


def _tampered(export_dir, tmp_path, name, edit):
    """A copy of the export with initializer ``name`` changed by ``edit`` (numpy, in place)."""
    out = tmp_path / "tampered"
    shutil.copytree(export_dir, out)
    model = onnx.load(str(out / "model.onnx"))
    init = next(t for t in model.graph.initializer if t.name == name)
    array = numpy_helper.to_array(init).copy()
    edit(array)
    init.CopyFrom(numpy_helper.from_array(array, name))
    onnx.save_model(model, str(out / "model.onnx"))
    return out


def test_taps_find_every_layer_and_op(five_layer_w4a16):
    taps = find_taps(load_graph(five_layer_w4a16 / "model.onnx").graph)
    assert not taps.reason
    assert sorted(taps.layers) == list(range(LAYERS))
    # The stream runs layer to layer: each layer reads what the one before wrote.
    for i in range(1, LAYERS):
        assert taps.layers[i].x_in == taps.layers[i - 1].x_out
    assert len(taps.ops) == OPS_PER_LAYER * LAYERS + OPS_AFTER
    assert {t.layer for t in taps.ops} == set(range(LAYERS)) | {None}
    assert sorted(t.op_type for t in taps.ops if t.layer is None) == ["FloatProj", "RMSNorm"]


def test_every_piece_within_its_bound(five_layer_w4a16):
    report = compare_export(five_layer_w4a16, cases=CASES)
    assert report.ok, report.first_failure()
    assert {(r.case, r.layer) for r in report.layers} == {(c.name, i) for c in CASES for i in range(LAYERS)}
    assert len(report.ops) == (OPS_PER_LAYER * LAYERS + OPS_AFTER) * len(CASES)
    assert all(r.bound == tolerances.OP_FP32["bf16"] for r in report.ops if r.op_type == "W4A16Proj")
    assert all(r.bound == tolerances.OP_NON_PROJECTION[r.op_type] for r in report.ops if r.op_type != "W4A16Proj")
    assert {r.op_type for r in report.ops} == {"W4A16Proj", "RMSNorm", "FloatProj", "Attention"}
    assert all(r.bound == tolerances.LAYER_TEACHER_FORCED["quantized"] for r in report.layers)
    logits = [r for r in report.rows if r.output == "logits"]
    assert logits and all(r.top1 == 1.0 and r.cosine > 0.9999 for r in logits)
    # The end-to-end bound grows with the depth at which a value is computed.
    key = {r.layer: r.tolerance for r in report.rows if r.case == "prefill" and r.output.startswith("present_key")}
    assert key[0] < key[LAYERS - 1] < logits[0].tolerance


def test_one_weight_scale_times_1_5_in_a_middle_layer_fails(five_layer_w4a16, tmp_path):
    name = f"model.layers.{MIDDLE}.self_attn.qkv_proj.weight_scale"
    v_row = (CONFIG["num_attention_heads"] + CONFIG["num_key_value_heads"]) * CONFIG["head_dim"] + 5  # v_proj's row 5

    def edit(a):
        a[v_row, 0] *= 1.5

    out = _tampered(five_layer_w4a16, tmp_path, name, edit)
    r = CliRunner().invoke(cli, ["compare", str(out)])
    assert r.exit_code == 1, r.output
    assert f"layer {MIDDLE}: model.layers.{MIDDLE}.self_attn.qkv_proj (W4A16Proj" in r.output
    assert "NO" in r.output


def test_a_corrupted_norm_weight_fails_naming_its_layer(five_layer_w4a16, tmp_path):
    name = f"model.layers.{MIDDLE}.post_attention_layernorm.weight"

    def edit(a):
        a[3] *= 1.1

    out = _tampered(five_layer_w4a16, tmp_path, name, edit)
    r = CliRunner().invoke(cli, ["compare", str(out), "--json"])
    assert r.exit_code == 1, r.output
    report = json.loads(r.output[: r.output.rindex("}") + 1])
    assert report["first_failure"].startswith(f"layer {MIDDLE}: model.layers.{MIDDLE}.post_attention_layernorm (RMSNorm")
    bad = {(o["layer"], o["projection"]) for o in report["ops"] if not o["ok"]}
    assert bad == {(MIDDLE, name.removesuffix(".weight"))}


def test_two_swapped_groups_of_a_w4a16_weight_fail(five_layer_w4a16, tmp_path):
    name = f"model.layers.{MIDDLE}.mlp.down_proj.weight"  # K = 256: two groups of 128 per row

    def edit(a):
        half = a.shape[1] // 2  # packed: group g is bytes [g * 64, (g + 1) * 64)
        a[:, :half], a[:, half:] = a[:, half:].copy(), a[:, :half].copy()

    out = _tampered(five_layer_w4a16, tmp_path, name, edit)
    r = CliRunner().invoke(cli, ["compare", str(out), "--json"])
    assert r.exit_code == 1
    report = json.loads(r.output[: r.output.rindex("}") + 1])
    assert report["ok"] is False
    assert report["first_failure"].startswith(f"layer {MIDDLE}: model.layers.{MIDDLE}.mlp.down_proj ")
    bad = {(o["layer"], o["projection"]) for o in report["ops"] if not o["ok"]}
    assert bad == {(MIDDLE, f"model.layers.{MIDDLE}.mlp.down_proj")}


def test_metrics():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((3, 4, 50))
    assert rel_error(ref, ref) == 0.0 and top1_agreement(ref, ref) == 1.0
    assert kl_divergence(ref, ref) == pytest.approx(0.0, abs=1e-12)
    assert rel_error(ref * 1.01, ref) == pytest.approx(0.01)
    # Relative to a layer's update: the part passed through (base) is taken out.
    base = rng.standard_normal(ref.shape) * 100
    assert rel_error(base + ref * 1.01, base + ref, base=base) == pytest.approx(0.01)
    flipped = ref.copy()
    flipped[0, 0] = -ref[0, 0] * 10
    assert top1_agreement(flipped, ref) == pytest.approx(11 / 12)
    assert kl_divergence(flipped, ref) > 0.1
