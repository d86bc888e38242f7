"""The CLI through click's CliRunner: exit codes, messages and the files written (or not)."""

import json
import shutil
import struct
from pathlib import Path

import onnx
import torch
import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.exporter.demo import write_demo
from tests.support.checkpoints import stored_weight

FAST = ["--skip-engines", "--skip-compare", "-q"]


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def leftovers(parent: Path, name: str):
    return [p for p in parent.iterdir() if p.name == name or p.name.startswith(f".{name}.")]


def test_main_job_exports_and_verifies(demo_checkpoint, tmp_path):
    out = tmp_path / "job"
    r = run(demo_checkpoint, "-o", out, "--weight-quantization", "w8a8", "--skip-engines", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output)
    assert summary["steps"]["compare"]["ok"] is True
    assert summary["steps"]["engines"] == "skipped: --skip-engines"
    assert (out / "model.onnx").exists() and (out / "manifest.json").exists()

    r = run("inspect", out)
    assert r.exit_code == 0
    assert "W8A8Proj ffn fp8: 4" in r.output  # gate_up_proj, down_proj
    assert "weights: w8a8 (" in r.output and "w8a8_weight_scales=channel" in r.output  # not a JSON dump
    assert "weight_scale_granularity=channel" in r.output and "activation_scale_granularity=row" in r.output

    r = run("compare", out, "--json")
    assert r.exit_code == 0 and json.loads(r.output)["ok"] is True
    # A bound no real run meets: the check fails with exit code 1, not an error.
    r = run("compare", out, "--tolerance", "1e-15", "-q")
    assert r.exit_code == 1 and "disagree beyond tolerance" in r.output


def test_help_is_there():
    r = run("--help")
    assert r.exit_code == 0 and "MODEL" in r.output and "export" in r.output
    assert run("export", "--help").exit_code == 0


@pytest.fixture
def broken(tmp_path, demo_checkpoint):
    """A fresh copy of the demo checkpoint to break."""
    d = tmp_path / "ckpt"
    write_demo(d)
    return d


def _expect_usage_error(args, parent: Path, out_name: str, *needles):
    r = run(*args)
    assert r.exit_code == 2, r.output
    for needle in needles:
        assert needle in r.output, r.output
    assert not leftovers(parent, out_name), "an output was left behind"


def test_not_safetensors(tmp_path):
    f = tmp_path / "model.bin"
    f.write_bytes(b"hello")
    _expect_usage_error(["export", f, "-o", tmp_path / "o"], tmp_path, "o", "model.bin", "expected a .safetensors")


def test_truncated_header(broken, tmp_path):
    path = broken / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:8] + data[8:40])
    _expect_usage_error(["export", path, "-o", tmp_path / "o"], tmp_path, "o", "model.safetensors", "header")


def test_truncated_data_says_the_file_ends_early(broken, tmp_path):
    path = broken / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-1000])  # what an interrupted download leaves
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o", str(path),
                        "the file ends early (truncated")


def test_corrupt_header_length(broken, tmp_path):
    path = broken / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 1 << 40) + data[8:])
    _expect_usage_error(["export", path, "-o", tmp_path / "o"], tmp_path, "o", "header")


def test_missing_config(broken, tmp_path):
    (broken / "config.json").unlink()
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o", "config.json", "missing")


def test_unsupported_architecture(broken, tmp_path):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (broken / "config.json").write_text(json.dumps(cfg))
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o", "LlamaForCausalLM", "not supported")


def test_config_without_architectures_says_what_to_add(broken, tmp_path):
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["architectures"]
    cfg["model_type"] = "qwen3"
    (broken / "config.json").write_text(json.dumps(cfg))
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o", "no 'architectures' entry",
                        '"architectures": ["Qwen3ForCausalLM"]')


def _rewrite(ckpt: Path, edit):
    tensors = load_file(str(ckpt / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(ckpt / "model.safetensors"))


def test_missing_tensor(broken, tmp_path):
    _rewrite(broken, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o",
                        "model.layers.1.mlp.up_proj.weight", "missing")


def test_wrong_shape(broken, tmp_path):
    def edit(t):
        t["model.layers.0.mlp.down_proj.weight"] = t["model.layers.0.mlp.down_proj.weight"][:, :384].contiguous()
    _rewrite(broken, edit)
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o",
                        "model.layers.0.mlp.down_proj.weight", "expected shape [256, 768]", "[256, 384]")


def test_wrong_dtype(broken, tmp_path):
    def edit(t):
        t["model.norm.weight"] = t["model.norm.weight"].to(__import__("torch").int32)
    _rewrite(broken, edit)
    _expect_usage_error(["export", broken, "-o", tmp_path / "o"], tmp_path, "o", "model.norm.weight", "expected dtype")


def test_partial_last_group_exports_and_matches(tmp_path):
    # W4A16Proj version 2: K = 416 (down_proj) at group 128 has a partial last group of 32 (K a
    # multiple of 32, which the CUDA kernel needs: K = 400 is refused, tests/exporter/test_kernel_limits.py).
    d = tmp_path / "k416"
    write_demo(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 416
    (d / "config.json").write_text(json.dumps(cfg))
    from metrale_export.exporter.demo import demo_tensors
    save_file(demo_tensors(cfg), str(d / "model.safetensors"))
    r = run("export", d, "-o", tmp_path / "o", "--group-size", "128", "-q")
    assert r.exit_code == 0, r.output
    model = onnx.load(str(tmp_path / "o" / "model.onnx"))
    inits = {t.name: t for t in model.graph.initializer}
    downs = [n for n in model.graph.node if n.op_type == "W4A16Proj" and "down_proj" in n.input[1]]
    assert downs
    scale = inits[downs[0].input[2]]
    assert scale.data_type == onnx.TensorProto.BFLOAT16 and list(scale.dims) == [cfg["hidden_size"], 4]
    r = run("compare", tmp_path / "o")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("fmt, version", [("w4a16", 1), ("w8a8", 1), ("w8a8", 2)])
def test_export_of_an_older_op_contract_is_refused(demo_exports, tmp_path, fmt, version):
    # An export of an older op contract (metrale opset 1: W4A16Proj with float32 scales; opset 1 or
    # 2: W8A8Proj with exact f16 products, before version 3's FP8 tensor core) is refused by every
    # command that reads it, in one line that says to re-export; nothing reads it as the new version.
    old = tmp_path / f"v{version}"
    shutil.copytree(demo_exports[fmt], old)
    model = onnx.load(str(old / "model.onnx"))
    for o in model.opset_import:
        if o.domain == contract.DOMAIN:
            o.version = version
    onnx.save(model, str(old / "model.onnx"))
    for args in (["inspect", old], ["compare", old], ["build", old, "-o", tmp_path / "e"]):
        r = run(*args)
        assert r.exit_code == 2, (args, r.output)
        assert f"contract version {version}" in r.output and "re-export" in r.output, (args, r.output)
        assert len([line for line in r.output.splitlines() if "re-export" in line]) == 1, r.output


def test_existing_output_needs_force(demo_checkpoint, tmp_path):
    out = tmp_path / "exists"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run("export", demo_checkpoint, "-o", out, "-q")
    assert r.exit_code == 2 and "--force" in r.output
    assert (out / "keep.txt").read_text() == "mine"


def test_bad_layers_option(demo_checkpoint, tmp_path):
    _expect_usage_error(["export", demo_checkpoint, "-o", tmp_path / "o", "--layers", "7"], tmp_path, "o",
                        "--layers", "layer 7 does not exist")


def test_auto_weight_format_is_w4a16_for_float_checkpoints(demo_checkpoint):
    from metrale_export.cli.export import resolve_weight_format
    from metrale_export.exporter.checkpoint import Checkpoint

    ckpt = Checkpoint.open(demo_checkpoint)
    assert resolve_weight_format("auto", ckpt) == "w4a16"
    assert resolve_weight_format("w8a8", ckpt) == "w8a8"


def test_auto_weight_format_keeps_what_a_quantized_checkpoint_declares(tmp_path):
    from metrale_export.cli.export import resolve_weight_format
    from metrale_export.exporter.checkpoint import Checkpoint
    from support.checkpoints import write_fp8_block

    write_fp8_block(tmp_path / "fp8")
    assert resolve_weight_format("auto", Checkpoint.open(tmp_path / "fp8")) == "declared"


@pytest.mark.parametrize("flags, symmetric, search", [(["--symmetric"], True, True),
                                                      (["--no-scale-search"], False, False)])
def test_w4a16_symmetry_and_scale_search_flags_reach_the_exported_weights(demo_checkpoint, demo_exports, tmp_path,
                                                                          flags, symmetric, search):
    # The default (demo_exports, no flag) is asymmetric with the search; each flag changes only its
    # own half, and the exported tensors are the quantizer's for that choice, byte for byte.
    from onnx import numpy_helper

    from metrale_export.ops import w4a16

    out = tmp_path / "o"
    r = run("export", demo_checkpoint, "-o", out, "-q", *flags)
    assert r.exit_code == 0, r.output
    wq = json.loads((out / "manifest.json").read_text())["weight_quantization"]
    assert (wq["asymmetric"], wq["scale_search"]) == (not symmetric, search)
    default = json.loads((demo_exports["w4a16"] / "manifest.json").read_text())["weight_quantization"]
    assert (default["asymmetric"], default["scale_search"]) == (True, True)
    ckpt = load_file(str(demo_checkpoint))
    model, base = (onnx.load(str(d / "model.onnx")) for d in (out, demo_exports["w4a16"]))
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    base_inits = {t.name: numpy_helper.to_array(t) for t in base.graph.initializer}
    nodes = [n for n in model.graph.node if n.op_type == "W4A16Proj"]
    assert nodes
    differs = False
    for n in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["has_zero_point"] == (not symmetric)
        q = w4a16.quantize(stored_weight(ckpt, n.input[1].removesuffix(".weight")), attrs["group_size"], symmetric,
                           search=search)
        want = [q.weight, q.weight_scale.view(torch.int16)] + ([] if symmetric else [q.zero_point])
        got = [inits[name] for name in n.input[1:]]
        assert len(got) == len(want), n.name
        for g, w in zip(got, want):
            assert g.tobytes() == w.numpy().tobytes(), (n.input[1], flags)
        differs |= any(inits[a].tobytes() != base_inits[b].tobytes() for a, b in zip(n.input[1:], n.input[1:])
                       if b in base_inits)
    assert differs  # the flag changed the weights against the default export


def test_compare_when_the_checkpoint_moved_says_to_pass_it(demo_exports, tmp_path):
    out = tmp_path / "moved"
    shutil.copytree(demo_exports["w8a8"], out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["model"]["checkpoint_path"] = str(tmp_path / "gone")
    (out / "manifest.json").write_text(json.dumps(manifest))
    r = run("compare", out)
    assert r.exit_code == 2, r.output
    assert f"the checkpoint it was exported from, {tmp_path / 'gone'}" in r.output and "--checkpoint" in r.output


def test_compare_of_an_engine_directory_names_the_export(tmp_path):
    engines = tmp_path / "job" / "engines"
    engines.mkdir(parents=True)
    (engines / "manifest.json").write_text(json.dumps(
        {"manifest_version": 1, "engines": [], "source": {"path": str(tmp_path / "job" / "model.onnx")}}))
    r = run("compare", engines)
    assert r.exit_code == 2, r.output
    assert "an engine directory" in r.output and f"built from, {tmp_path / 'job'}" in r.output
    assert "re-export" not in r.output
