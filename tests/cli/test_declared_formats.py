"""The declared quantization formats through the real CLI (click's CliRunner): ``inspect`` on a
checkpoint of every format and on its export, ``--weight-quantization`` / ``--activation-quantization
declared`` and the requests a checkpoint cannot honour.

Checkpoints come from ``tests/support/checkpoints.py``: compressed-tensors and ModelOpt ones are made
by those libraries (each case skips with the reason when its library is missing); FP8 block, GPTQ and
AWQ by the generators.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.engines import backends
from support import checkpoints as T

LIBRARY = {"ct": ("compressed_tensors", "compressed-tensors"), "mo": ("modelopt.torch.quantization", "nvidia-modelopt")}

# case -> (writer, expected `inspect` line fragments, expected describe() facts)
CASES = {
    "ct-W4A16": (lambda d: T.write_compressed_tensors(d, "W4A16"),
                 ["compressed-tensors pack-quantized: int4 weights, group 128, symmetric",
                  "activations: none (bf16", "-> W4A16Proj with activation_format bf16"],
                 {"bits": 4, "group_size": 128, "symmetric": True, "activation_format": "bf16"}),
    "ct-W4A16_ASYM-g32": (lambda d: T.write_compressed_tensors(d, "W4A16_ASYM", group_size=32),
                          ["pack-quantized: int4 weights, group 32, asymmetric (zero points)"],
                          {"bits": 4, "group_size": 32, "symmetric": False}),
    "ct-FP8_DYNAMIC": (lambda d: T.write_compressed_tensors(d, "FP8_DYNAMIC"),
                       ["compressed-tensors float-quantized: fp8 e4m3 weights, scales per output channel",
                        "activations: fp8 dynamic per token", "-> W8A8Proj with activation_format fp8"],
                       {"bits": 8, "weight_scales": "per output channel", "activation_scale_granularity": "row"}),
    "ct-FP8_BLOCK": (lambda d: T.write_compressed_tensors(d, "FP8_BLOCK"),
                     ["scales per 128x128 block", "activations: fp8 dynamic per token and group of 128"],
                     {"weight_scales": "per 128x128 block", "activation_scale_granularity": "row_block128"}),
    "ct-FP8-static": (lambda d: T.write_compressed_tensors(d, "FP8"),
                      ["scales per tensor", "fp8 static per-tensor input_scale replaced by dynamic per-row scales"],
                      {"activation_format": "fp8"}),
    "ct-NVFP4": (lambda d: T.write_compressed_tensors(d, "NVFP4"),
                 ["compressed-tensors nvfp4-pack-quantized: nvfp4 (e2m1) weights, group 16",
                  "activations: nvfp4, static global scale (input_global_scale)",
                  "-> W4A4Proj with activation_format nvfp4"],
                 {"bits": 4, "group_size": 16, "activation_format": "nvfp4"}),
    "ct-NVFP4A16": (lambda d: T.write_compressed_tensors(d, "NVFP4A16"),
                    ["nvfp4-pack-quantized", "activations: none (bf16", "-> W4A4Proj with activation_format bf16"],
                    {"activation_format": "bf16"}),
    "mo-NVFP4": (lambda d: T.write_modelopt(d, "NVFP4"),
                 ["modelopt NVFP4: nvfp4 (e2m1) weights, group 16, scales e4m3 per group x a global weight_scale_2",
                  "activations: nvfp4, static global scale (input_scale)", "-> W4A4Proj with activation_format nvfp4"],
                 {"scheme": "NVFP4", "activation_format": "nvfp4"}),
    "mo-FP8": (lambda d: T.write_modelopt(d, "FP8"),
               ["modelopt FP8: fp8 e4m3 weights, scales per tensor",
                "fp8 static per-tensor input_scale replaced by dynamic per-row scales"],
               {"scheme": "FP8", "bits": 8, "activation_format": "fp8"}),
    "fp8_block": (lambda d: T.write_fp8_block(d),
                  ["fp8-block (weight_scale_inv)", "scales per 128x128 block (weight_scale_inv",
                   "activations: fp8 dynamic per token and group of 128", "-> W8A8Proj with activation_format fp8"],
                  {"bits": 8, "activation_scale_granularity": "row_block128"}),
    "gptq": (lambda d: T.write_gptq(d),
             ["gptq v1 (checkpoint_format gptq", "int4 weights, group 128, asymmetric (zero points)",
              "desc_act=False", "g_idx=contiguous", "-> W4A16Proj with activation_format bf16"],
             {"bits": 4, "group_size": 128, "symmetric": False, "desc_act": False}),
    "gptq-v2-sym-g64": (lambda d: T.write_gptq(d, sym=True, checkpoint_format="gptq_v2", group_size=64),
                        ["gptq v2 (checkpoint_format gptq_v2)", "int4 weights, group 64, symmetric"],
                        {"group_size": 64, "symmetric": True}),
    "gptq-act-order": (lambda d: T.write_gptq(d, act_order=True),
                       ["desc_act=True", "g_idx=act-order permutation", "the export refuses it"],
                       {"desc_act": True}),
    "awq": (lambda d: T.write_awq(d, group_size=32),
            ["awq gemm: int4 weights, group 32, asymmetric (zero points)", "-> W4A16Proj"],
            {"bits": 4, "group_size": 32, "symmetric": False}),
}


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _needs_library(case: str) -> None:
    prefix = case.split("-", 1)[0]
    if prefix in LIBRARY:
        module, package = LIBRARY[prefix]
        pytest.importorskip(module, reason=f"{package} makes this checkpoint (a test dependency)")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """case -> checkpoint directory, written on first use."""
    base = tmp_path_factory.mktemp("declared")
    made: dict = {}

    def get(case):
        _needs_library(case)
        if case not in made:
            made[case] = CASES[case][0](base / case)
        return made[case]

    return get


@pytest.mark.parametrize("case", sorted(CASES))
def test_inspect_checkpoint_prints_the_declared_format(checkpoints, case):
    ckpt = checkpoints(case)
    r = run("inspect", ckpt)
    assert r.exit_code == 0, r.output
    (line,) = [ln for ln in r.output.splitlines() if ln.startswith("declared format: ")]
    for fragment in CASES[case][1]:
        assert fragment in line, line
    assert "Qwen3ForCausalLM, 2 layers" in r.output

    r = run("inspect", ckpt, "--json")
    assert r.exit_code == 0, r.output
    declared = json.loads(r.output)["declared"]
    for key, value in CASES[case][2].items():
        assert declared[key] == value, (key, declared)


def test_inspect_float_checkpoint_declares_nothing(demo_checkpoint):
    r = run("inspect", demo_checkpoint)
    assert r.exit_code == 0, r.output
    assert "declared format: none: float weights" in r.output
    assert json.loads(run("inspect", demo_checkpoint, "--json").output)["declared"] is None


def test_inspect_rejects_a_directory_that_is_neither(tmp_path):
    r = run("inspect", tmp_path)
    assert r.exit_code == 2 and "neither an export (no model.onnx)" in r.output and "nor a checkpoint" in r.output


def test_inspect_float_export_says_no_declared_format(demo_exports):
    r = run("inspect", demo_exports["w4a16"], "--no-ops")
    assert r.exit_code == 0, r.output
    assert "declared format: none: float weights" in r.output
    manifest = json.loads((demo_exports["w4a16"] / "manifest.json").read_text())
    assert manifest["weight_quantization"]["declared"] is None


# --- exports of declared formats: the manifest records, inspect prints, engines take it ------------

@pytest.fixture(scope="module")
def exported(checkpoints, tmp_path_factory):
    """case -> export directory (one decoder layer, through the CLI), made on first use."""
    base = tmp_path_factory.mktemp("declared-exports")
    made: dict = {}

    def get(case):
        if case not in made:
            out = base / case
            r = run("export", checkpoints(case), "-o", out, "--weight-quantization", "declared", "--layers", "0", "-q")
            assert r.exit_code == 0, r.output
            made[case] = out
        return made[case]

    return get


@pytest.mark.parametrize("case", ["gptq", "mo-NVFP4"])
def test_export_records_and_inspect_prints_the_declared_format(checkpoints, exported, case):
    out = exported(case)
    manifest = json.loads((out / "manifest.json").read_text())
    declared = manifest["weight_quantization"]["declared"]
    assert declared == T.source_for(checkpoints(case)).describe()
    r = run("inspect", out, "--no-ops")
    assert r.exit_code == 0, r.output
    (export_line,) = [ln for ln in r.output.splitlines() if ln.startswith("declared format: ")]
    (ckpt_line,) = [ln for ln in run("inspect", checkpoints(case)).output.splitlines()
                    if ln.startswith("declared format: ")]
    assert export_line == ckpt_line
    for fragment in CASES[case][1]:
        assert fragment in export_line


def test_weight_request_the_checkpoint_cannot_honour_is_refused(checkpoints, tmp_path):
    r = run("export", checkpoints("gptq"), "-o", tmp_path / "o", "--weight-quantization", "w4a4", "-q")
    assert r.exit_code == 2
    assert "already quantized (gptq: w4a16 weights)" in r.output
    assert "--weight-quantization w4a4 would re-quantize" in r.output and "declared" in r.output
    assert not (tmp_path / "o").exists()


def test_none_on_a_quantized_checkpoint_says_it_holds_no_float_weights(checkpoints, tmp_path):
    r = run("export", checkpoints("gptq"), "-o", tmp_path / "o", "--weight-quantization", "none", "-q")
    assert r.exit_code == 2
    assert "--weight-quantization none needs float weights, which it does not hold" in r.output
    assert "re-quantize" not in r.output and "declared" in r.output
    assert not (tmp_path / "o").exists()


def test_gptq_act_order_is_refused_by_the_export_with_the_reason(checkpoints, tmp_path):
    r = run("export", checkpoints("gptq-act-order"), "-o", tmp_path / "o", "-q")
    assert r.exit_code == 2
    assert "act-order (desc_act) groups: g_idx is not k // 128" in r.output
    assert "Re-quantize with desc_act=false or static_groups=true" in r.output
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("o", ".o"))]


_rtx = pytest.mark.skipif(backends.available()["tensorrt-rtx"] is None,
                          reason=f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")
BUILD = ["--backend", "tensorrt-rtx", "--lowering", "qdq", "--profiles", "1-4", "-q"]


@_rtx
@pytest.mark.parametrize("case,op,fmt", [("mo-NVFP4", "W4A4Proj", "nvfp4"), ("fp8_block", "W8A8Proj", "fp8")])
def test_activation_quantization_declared_takes_the_checkpoint_format(exported, tmp_path, case, op, fmt):
    """NVFP4 with a static input_scale, FP8 dynamic per token and group: the engine runs what the
    checkpoint declares."""
    out = exported(case)
    r = run("build", out, "-o", tmp_path / "engines", "--activation-quantization", "declared", "--json", *BUILD)
    assert r.exit_code == 0, r.output
    manifest = json.loads(r.output)
    (engine,) = manifest["engines"]
    assert engine["formats"] and set(engine["formats"].values()) == {fmt}, engine["formats"]
    # The quantized projections (the export's Attention, RMSNorm and FloatProj ops stay float).
    ops = [o for o in json.loads((out / "manifest.json").read_text())["ops"]
           if o["op_type"] in contract.projections()]
    assert {o["op_type"] for o in ops} == {op}
    if fmt == "nvfp4":
        assert all(o["has_input_scale"] == 1 for o in ops)  # the static input_scale is kept
    else:
        assert all(o["activation_scale_granularity"] == "row_block128" for o in ops)


@_rtx
def test_w4a4_activations_from_a_w4a16_checkpoint_are_refused(exported, tmp_path):
    r = run("build", exported("gptq"), "-o", tmp_path / "engines", "--activation-quantization", "nvfp4", *BUILD)
    assert r.exit_code == 2, r.output
    assert "nvfp4 activations with int4 weights (W4A16Proj) are not in the op contract's table" in r.output
    assert "W4A16Proj runs bf16" in r.output
    assert not (tmp_path / "engines").exists()
