"""Static activation scales from calibration (exporter/calibration.py, --activation-scales static):
the data readers and their refusals, the layer-by-layer amax against the whole model's, the
exported nodes and scales, deterministic bytes, compare's static-vs-dynamic report, and the CLI."""

from __future__ import annotations

import json

import onnx
import pytest
import torch
from click.testing import CliRunner

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.compare.accuracy import compare_export
from metrale_export.errors import InputError
from metrale_export.exporter import calibration
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.projection import Projection
from metrale_export.exporter.quantization import QuantRequest
from metrale_export.exporter.session import open_model
from metrale_export.ops import w8a8
from support.export_hashes import file_hashes

VOCAB = 512  # the demo model's


def _static(checkpoint, out, weight="w8a8", data="random:64", **request):
    return export(checkpoint, out, ExportOptions(request=QuantRequest(weight=weight, **request),
                                                 activation_scales="static", calibration_data=data))


@pytest.fixture(scope="module")
def static_w8a8(tmp_path_factory, demo_checkpoint):
    return _static(demo_checkpoint, tmp_path_factory.mktemp("static") / "w8a8")


# --- the data -------------------------------------------------------------------------------


def test_random_tokens_are_seeded_and_chunked(tmp_path):
    a = calibration.read_data("random:600", tmp_path, VOCAB)
    b = calibration.read_data("random:600", tmp_path, VOCAB)
    assert a == b and a.tokens == 600
    assert [len(s) for s in a.sequences] == [256, 256, 88]
    assert all(0 <= t < VOCAB for s in a.sequences for t in s)
    assert len(set(a.sequences[0])) > 100  # not a constant


def test_token_id_file_one_sequence_a_line(tmp_path):
    p = tmp_path / "calib.ids"
    p.write_text("1 2 3\n\n 7  8\n")
    data = calibration.read_data(str(p), tmp_path, VOCAB)
    assert data.sequences == ((1, 2, 3), (7, 8)) and data.describe()["data"] == "calib.ids"


def test_text_is_tokenized_with_the_checkpoints_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "the": 5, "cat": 9, "sat": 11}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    p = tmp_path / "calib.txt"
    p.write_text("the cat sat the dog")
    assert calibration.read_data(str(p), tmp_path, VOCAB).sequences == ((5, 9, 11, 5, 0),)
    # Outside the vocabulary of the model: refused, naming the id.
    with pytest.raises(InputError, match=r"token id 11 .*outside the vocabulary \[0, 10\)"):
        calibration.read_data(str(p), tmp_path, 10)


@pytest.mark.parametrize("content, suffix, match", [
    ("", ".txt", "holds no tokens"),
    ("\n  \n", ".ids", "holds no tokens"),
    ("3 4 512", ".ids", r"token id 512 \(sequence 0\) is outside the vocabulary \[0, 512\)"),
    ("3 -1", ".ids", "token id -1"),
    ("3 x", ".ids", "line 1: expected whitespace-separated token ids"),
])
def test_unusable_data_is_refused_in_one_line(tmp_path, content, suffix, match):
    p = tmp_path / f"calib{suffix}"
    p.write_text(content)
    with pytest.raises(InputError, match=match) as e:
        calibration.read_data(str(p), tmp_path, VOCAB)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_text_without_a_tokenizer_and_bad_specs_are_refused(tmp_path):
    p = tmp_path / "calib.txt"
    p.write_text("hello")
    with pytest.raises(InputError, match="needs the checkpoint's tokenizer.json"):
        calibration.read_data(str(p), tmp_path, VOCAB)
    for spec in ("random:0", "random:x"):
        with pytest.raises(InputError, match="expected random:N"):
            calibration.read_data(spec, tmp_path, VOCAB)
    with pytest.raises(InputError, match="no such file"):
        calibration.read_data(str(tmp_path / "missing.txt"), tmp_path, VOCAB)
    with pytest.raises(InputError, match="needs --calibration-data"):
        calibration.check_options("static", None)
    with pytest.raises(InputError, match="only with --activation-scales static"):
        calibration.check_options("dynamic", "random:4")


# --- the amax and the scales -------------------------------------------------------------------


def test_layer_by_layer_amax_is_the_whole_models(demo_checkpoint):
    """The streamed calibration records exactly what the whole in-memory model's projections see."""
    session = open_model(demo_checkpoint, {"weight": "w8a8", "quantize_lm_head": True})
    data = calibration.read_data("random:300", demo_checkpoint.parent, VOCAB)
    got = calibration.calibrate(session, torch.float32, None, data)

    model = session.model(torch.float32).load_weights(session.source)
    want: dict[str, float] = {}

    def hook(module, args):
        a = float(args[0].detach().to(torch.float32).to(torch.bfloat16).abs().amax())
        want[module.spec.name] = max(want.get(module.spec.name, 0.0), a)

    for _, m in model.projections():
        if isinstance(m, Projection):
            m.register_forward_pre_hook(hook)
    with torch.no_grad():
        for seq in data.sequences:
            ids = torch.tensor([seq])
            model(ids, torch.arange(len(seq)).reshape(1, -1), *[s.example(1, 0, torch.float32, "cpu")
                                                               for _, s in model.state_specs()])
    assert got == want
    assert "lm_head" in got and len(got) == 1 + 4 * 2  # every (fused) projection of the 2 layers, and the head
    assert all(a > 0 for a in got.values())


def test_static_scales_follow_the_contract():
    assert calibration.static_scale("w8a8", 448.0) == 1.0
    assert calibration.static_scale("w8a8", 0.0) == 1.0
    assert calibration.static_scale("w4a4", 2688.0) == 1.0
    assert calibration.static_scale("w8a8", 3.0) == float(torch.tensor(3.0) / 448.0)


def test_the_static_scale_saturates():
    """x / sx beyond 448 clips to +-448 (docs/ops.md), in the reference op."""
    w = torch.eye(4) * 0.5
    q = w8a8.quantize(w)
    x = torch.tensor([[1.0, -10.0, 0.25, 0.0]])
    sx = torch.tensor([1.0 / 448])  # the scale of amax 1: -10 saturates to -1
    y = w8a8.proj(x, q.weight, q.weight_scale, None, "channel", "fp8", "tensor", sx)
    torch.testing.assert_close(y, torch.tensor([[0.5, -0.5, 0.125, 0.0]]), rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="needs input_scale"):
        w8a8.proj(x, q.weight, q.weight_scale, None, "channel", "fp8", "tensor")


# --- the export ----------------------------------------------------------------------------------


def test_static_w8a8_export_has_tensor_scales_and_version_3_nodes(static_w8a8):
    out = static_w8a8.out_dir
    model = onnx.load(str(out / "model.onnx"))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    manifest = json.loads((out / "manifest.json").read_text())
    scales = manifest["activation_scales"]["scales"]
    nodes = [n for n in model.graph.node if n.domain == contract.DOMAIN and n.op_type in contract.projections()]
    assert nodes and len(scales) == len(nodes)  # lm_head stays float (a FloatProj)
    for n in nodes:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        assert a["activation_scale_granularity"] == b"tensor" and a["plugin_version"] == b"3"
        name = a["name"].decode()
        # q/k/v share their input, so their equal scales may share one initializer.
        assert n.input[3].endswith(".input_scale") and len(n.input) == 4
        assert float(inits[n.input[3]][0]) == scales[name] > 0
    calib = manifest["activation_scales"]["calibration"]
    assert calib["data"] == "random:64" and calib["tokens"] == 64
    projections = {k: v for k, v in manifest["op_counts"].items() if k.split("/")[0] in contract.projections()}
    assert projections == {"W8A8Proj/attn/fp8": 4, "W8A8Proj/ffn/fp8": 4}  # qkv, o; gate_up, down


def test_static_export_is_deterministic(static_w8a8, demo_checkpoint, tmp_path):
    again = _static(demo_checkpoint, tmp_path / "again")
    assert file_hashes(again.out_dir) == file_hashes(static_w8a8.out_dir)
    other = _static(demo_checkpoint, tmp_path / "other", data="random:300")
    assert file_hashes(other.out_dir)["model.onnx"] != file_hashes(static_w8a8.out_dir)["model.onnx"]


def test_compare_passes_and_reports_the_error_against_dynamic_scales(static_w8a8):
    report = compare_export(static_w8a8.out_dir)
    assert report.ok, report.first_failure()
    assert [r["case"] for r in report.static_vs_dynamic] == ["prefill", "decode"]
    for r in report.static_vs_dynamic:
        assert 0 < r["rel_error"] < 0.5 and r["top1"] > 0.5
    assert "static activation scales vs dynamic" in report.summary()
    assert "static_vs_dynamic" in json.loads(report.to_json())


def test_static_w4a4_export_gives_every_projection_an_input_scale(demo_checkpoint, tmp_path):
    done = _static(demo_checkpoint, tmp_path / "w4a4", weight="w4a4", quantize_lm_head=True)
    model = onnx.load(str(done.out_dir / "model.onnx"))
    nodes = [n for n in model.graph.node if n.domain == contract.DOMAIN and n.op_type in contract.projections()]
    assert len(nodes) == 9  # 8 (fused) projections and the head
    for n in nodes:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        assert a["has_input_scale"] == 1 and "plugin_version" not in a  # W4A4Proj version 1
    report = compare_export(done.out_dir)
    assert report.ok, report.first_failure()


def test_dynamic_w8a8_nodes_are_version_3(demo_exports):
    """W8A8Proj version 3 changed the fp8 arithmetic (docs/ops.md): dynamic-scale nodes are version-3
    nodes too (plugin_version "3", the graph's metrale opset 3), never written as version 1."""
    model = onnx.load(str(demo_exports["w8a8"] / "model.onnx"))
    nodes = [n for n in model.graph.node if n.op_type == "W8A8Proj"]
    assert nodes
    for n in nodes:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in n.attribute}
        assert a["plugin_version"] == b"3" and a["activation_scale_granularity"] == b"row"
        assert contract.op("W8A8Proj").node_version(a) == 3
    assert {o.domain: o.version for o in model.opset_import}[contract.DOMAIN] == 3


# --- the command line ------------------------------------------------------------------------------


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


@pytest.mark.parametrize("content, words", [("", "holds no tokens"), ("1 2 999", "token id 999")])
def test_cli_refuses_unusable_calibration_data_with_exit_2(demo_checkpoint, tmp_path, content, words):
    data = tmp_path / "calib.ids"
    data.write_text(content)
    r = _cli("export", demo_checkpoint, "-o", tmp_path / "out", "--weight-quantization", "w8a8",
             "--activation-scales", "static", "--calibration-data", data, "--quiet")
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and words in lines[0] and str(data) in lines[0]
    assert not (tmp_path / "out").exists()


def test_cli_refuses_static_scales_without_data_or_quantized_activations(demo_checkpoint, tmp_path):
    r = _cli("export", demo_checkpoint, "-o", tmp_path / "a", "--weight-quantization", "w8a8",
             "--activation-scales", "static")
    assert r.exit_code == 2 and "needs --calibration-data" in r.output
    r = _cli("export", demo_checkpoint, "-o", tmp_path / "b", "--weight-quantization", "w4a16",
             "--activation-scales", "static", "--calibration-data", "random:8")
    assert r.exit_code == 2 and "no W8A8 or W4A4 projection" in r.output


def test_cli_offers_only_the_dynamic_granularities_as_w8a8_activation_scales(demo_checkpoint, tmp_path):
    """The static per-tensor scale comes from --activation-scales static (calibrated), never from
    --w8a8-activation-scales: 'tensor' there is a usage error naming the dynamic choices."""
    r = _cli("export", demo_checkpoint, "-o", tmp_path / "t", "--weight-quantization", "w8a8",
             "--w8a8-activation-scales", "tensor")
    assert r.exit_code == 2 and "'tensor' is not one of 'row', 'row_block128'" in r.output, r.output
    assert not (tmp_path / "t").exists()
