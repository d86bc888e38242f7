"""Real engines from the qdq lowering, built by TensorRT-RTX on this CPU-only machine for SM 8.9.

TensorRT-RTX's parser and builder check every lowered graph and every profile; the engines cannot
run here (no GPU), so the checks are: the build succeeds, the files and the manifest say what was
built, reruns skip unchanged engines, and failures carry TensorRT's own message.
"""

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from metrale_export.engines import backends
from metrale_export.engines.build import BuildOptions, build_engines
from metrale_export.engines.policy import parse_policy
from metrale_export.engines.profiles import parse_profiles
from support.graphs import Proj, head_graph, model_graph, projection_graph
from metrale_export.errors import BuildError, InputError

_found = backends.available()
pytestmark = pytest.mark.skipif(
    _found["tensorrt-rtx"] is None,
    reason=f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}",
)


def _options(spec="1,2-8,9-32,33-128", policy="declared", **kw):
    return BuildOptions(parse_profiles(spec), parse_policy(policy), backend="tensorrt-rtx",
                        lowering="qdq", **kw)


def _events(log):
    """The per-engine events (skip, build, built, remove); the build-wide ones (lower: a lowered
    graph written, plan: the expected times) are tests/cli/test_build_progress.py's."""
    return lambda event, rows, details: event in ("lower", "plan") or log.append(
        (event, rows.label if rows else Path(details["file"]).name))


@pytest.fixture
def chain_path(tmp_path):
    chain = projection_graph(128, [Proj("W4A16Proj", 96, family="attn"),
                                   Proj("W8A8Proj", 64, bias=True, options={"granularity": "block128"}),
                                   Proj("W4A4Proj", 48, family="head")], seed=11)
    path = tmp_path / "chain.onnx"
    onnx.save(chain.model, path)
    return path


def test_one_engine_per_profile_then_rerun_skips(chain_path, tmp_path):
    out = tmp_path / "engines"
    log = []
    manifest = build_engines(chain_path, out, _options(), _events(log))
    assert [e for e in log if e[0] == "built"] == [("built", l) for l in ("1", "2-8", "9-32", "33-128")]
    assert manifest["backend"] == {"name": "tensorrt-rtx", "version": _found["tensorrt-rtx"],
                                   "targets": ["8.9"]}
    assert manifest["row_invariance"]["promised"] is False  # qdq promises nothing
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    for entry in manifest["engines"]:
        data = (out / entry["file"]).read_bytes()
        assert len(data) == entry["bytes"] > 10_000
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
        assert entry["formats"] == {"layers.0.attn.w4a16proj": "bf16",
                                    "layers.1.ffn.w8a8proj": "fp8", "layers.2.head.w4a4proj": "nvfp4"}
        (only,) = entry["optimization_profiles"]
        assert only["shapes"]["x"]["min"] == [entry["rows"]["lo"], 128]
        assert only["shapes"]["x"]["max"] == [entry["rows"]["hi"], 128]
    # Fixed formats: one lowered graph serves every profile.
    assert len({e["onnx"] for e in manifest["engines"]}) == 1
    assert not list(out.rglob(".*.tmp-*"))

    log.clear()
    again = build_engines(chain_path, out, _options(), _events(log))
    assert log == [("skip", l) for l in ("1", "2-8", "9-32", "33-128")]
    assert again["engines"] == manifest["engines"]

    # A new profile set: kept ranges skip, new ones build, dropped ones are removed.
    log.clear()
    build_engines(chain_path, out, _options("1,2-8,9-64"), _events(log))
    assert log == [("skip", "1"), ("skip", "2-8"), ("build", "9-64"), ("built", "9-64"),
                   ("remove", "rows-9-32.engine"), ("remove", "rows-33-128.engine")]
    assert sorted(p.name for p in out.glob("*.engine")) == \
        ["rows-1.engine", "rows-2-8.engine", "rows-9-64.engine"]


def test_changed_inputs_rebuild(chain_path, tmp_path):
    out = tmp_path / "engines"
    build_engines(chain_path, out, _options("2-8"))
    log = []
    build_engines(chain_path, out, _options("2-8", policy="bf16"), _events(log))  # formats changed
    assert log == [("build", "2-8"), ("built", "2-8")]
    model = onnx.load(chain_path)
    bias = next(t for t in model.graph.initializer if t.name.endswith(".bias"))
    bias.CopyFrom(onnx.numpy_helper.from_array(np.ones(64, np.float32), bias.name))
    onnx.save(model, chain_path)
    log.clear()
    build_engines(chain_path, out, _options("2-8", policy="bf16"), _events(log))  # source changed
    assert log == [("build", "2-8"), ("built", "2-8")]


def test_model_interface_gets_decode_and_prefill_profiles(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(model_graph(layers=2), path)
    manifest = build_engines(path, tmp_path / "out", _options("1,2-8,9-32,33-128,129-512",
                                                              policy="adaptive", max_context=512))
    engines = {e["label"]: e for e in manifest["engines"]}
    assert [p["name"] for p in engines["1"]["optimization_profiles"]] == ["decode"]
    decode, prefill = engines["129-512"]["optimization_profiles"]
    assert decode["shapes"]["input_ids"]["max"] == [512, 1]
    assert prefill["shapes"]["input_ids"]["max"] == [1, 512]
    assert prefill["shapes"]["past_key.1"]["max"] == [1, 2, 512, 16]
    # adaptive: bf16 up to 32 rows, the native formats above; and no row-invariance promise.
    assert engines["9-32"]["formats"]["layers.0.attn.v_proj"] == "bf16"
    assert engines["33-128"]["formats"]["layers.0.attn.v_proj"] == "fp8"
    assert engines["33-128"]["formats"]["lm_head"] == "nvfp4"
    assert len({e["onnx"] for e in manifest["engines"]}) == 2


def test_refusal_happens_before_any_build(chain_path, tmp_path):
    with pytest.raises(InputError, match=r"fp8 activations with int4 weights \(W4A16Proj\)"):
        build_engines(chain_path, tmp_path / "out", _options(policy="fp8"))
    assert not (tmp_path / "out").exists()


def test_tensorrt_message_reaches_the_error(tmp_path):
    # FP4 weights cannot be compiled for SM 8.9: TensorRT-RTX says so, and the error shows it.
    codes = np.arange(64 * 32, dtype=np.uint8).reshape(64, 32) % 16
    packed = (codes.reshape(-1)[0::2] | (codes.reshape(-1)[1::2] << 4)).astype(np.uint8)
    w = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT4E2M1, [64, 32], packed.tobytes(), raw=True)
    s = onnx.numpy_helper.from_array(np.ones((4, 32), np.float32), "s")
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("DequantizeLinear", ["w", "s"], ["wd"], axis=0, block_size=16),
         onnx.helper.make_node("MatMul", ["x", "wd"], ["y"])],
        "fp4", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["M", 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["M", 32])], [w, s])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 23)])
    model.ir_version = 11
    onnx.save(model, tmp_path / "fp4.onnx")
    with pytest.raises(BuildError, match=r"rows 1-4: tensorrt-rtx .* could not build(.|\n)*fp4"):
        build_engines(tmp_path / "fp4.onnx", tmp_path / "out", _options("1-4"))
    assert not list((tmp_path / "out").glob("*.engine"))


def test_bfloat16_graph_builds(tmp_path):
    chain = projection_graph(128, [Proj("W4A16Proj", 64), Proj("W8A8Proj", 48), Proj("W4A4Proj", 32)],
                             seed=4, dtype=onnx.TensorProto.BFLOAT16)
    onnx.save(chain.model, tmp_path / "bf16.onnx")
    manifest = build_engines(tmp_path / "bf16.onnx", tmp_path / "out", _options("1,2-64", policy="bf16"))
    assert [e["label"] for e in manifest["engines"]] == ["1", "2-64"]
    assert manifest["row_invariance"]["promised"] is False


def test_partial_last_group_builds(tmp_path):
    # W4A16Proj version 2: bf16 group scales and K = 400 at group 128 (a partial last group).
    chain = projection_graph(400, [Proj("W4A16Proj", 64, options={"group_size": 128}),
                                   Proj("W4A16Proj", 48, options={"group_size": 32, "symmetric": False})],
                             seed=6)
    onnx.save(chain.model, tmp_path / "partial.onnx")
    manifest = build_engines(tmp_path / "partial.onnx", tmp_path / "out", _options("1,2-64"))
    assert [e["label"] for e in manifest["engines"]] == ["1", "2-64"]


@pytest.mark.parametrize("weights", ["w4a16", "w8a8", "w4a4"])
def test_demo_model_builds_every_default_profile(weights, demo_exports, tmp_path):
    """The acceptance check: the demo model's qdq engines for every default profile (SM 8.9)."""
    from metrale_export.engines.profiles import DEFAULT_PROFILES

    log = []
    out = tmp_path / "engines"  # not inside the shared export directory
    manifest = build_engines(demo_exports[weights], out, _options(DEFAULT_PROFILES), _events(log))
    labels = [e["label"] for e in manifest["engines"]]
    assert labels == ["1", "2-8", "9-32", "33-128", "129-4096"]
    assert [e for e in log if e[0] == "built"] == [("built", l) for l in labels]
    assert (out / "manifest.json").is_file() and manifest["complete"] is True
    names = [p["name"] for p in manifest["engines"][-1]["optimization_profiles"]]
    assert names == ["decode", "prefill"]


def test_an_interrupted_build_keeps_what_it_built(chain_path, tmp_path):
    out = tmp_path / "engines"

    def interrupt_at_second(event, rows, details):
        if event == "build" and rows.label == "2-8":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_engines(chain_path, out, _options("1,2-8,9-32"), interrupt_at_second)
    partial = json.loads((out / "manifest.json").read_text())
    assert partial["complete"] is False and [e["label"] for e in partial["engines"]] == ["1"]
    log = []
    manifest = build_engines(chain_path, out, _options("1,2-8,9-32"), _events(log))
    assert log == [("skip", "1"), ("build", "2-8"), ("built", "2-8"), ("build", "9-32"), ("built", "9-32")]
    assert manifest["complete"] is True
    # One lowered graph: its header, its weights file and the header shared-weights engines are
    # built from (docs/engines.md, Output and reruns).
    graph = manifest["engines"][0]["onnx"][5:]
    assert sorted(p.name for p in (out / "onnx").iterdir()) == sorted(
        [graph, graph + ".data", graph.removesuffix(".onnx") + ".shared.onnx"])


def test_a_library_without_creators_is_refused(tmp_path):
    import math  # any shared object without getCreators

    from metrale_export.engines.build import load_plugin_library

    backend = backends.activate("tensorrt-rtx")
    with pytest.raises(BuildError, match="could not load it as a plugin library"):
        load_plugin_library(backend, Path(math.__file__))


def test_max_context_within_the_models_positions(tmp_path):
    export = tmp_path / "export"
    export.mkdir()
    onnx.save(model_graph(), export / "model.onnx")
    (export / "manifest.json").write_text(json.dumps({"model": {"max_position_embeddings": 1024}}))
    with pytest.raises(InputError, match="max_position_embeddings \\(1024"):
        build_engines(export, None, _options("1,2-8", max_context=4096))
    manifest = build_engines(export, None, _options("1", max_context=1024))
    assert manifest["model"] == {"max_position_embeddings": 1024}
    assert (export / "engines" / "rows-1.engine").is_file()


def _embedding_and_head(path, vocab=8192, hidden=256):
    """ids [M] -> Gather(embedding) -> MatMul(lm_head [hidden, vocab]): weight-dominated, bf16-exact."""
    onnx.save(head_graph(vocab, hidden), path)
    return vocab * hidden


def test_engines_keep_float_weights_in_bfloat16(tmp_path):
    """The engine stores the bf16 weights (half the float32 engine), and the manifest's numbers are
    those of the weights: bytes, and per decode token one embedding row plus the whole lm_head."""
    n = _embedding_and_head(tmp_path / "head.onnx")
    built = {fw: build_engines(tmp_path / "head.onnx", tmp_path / fw,
                               _options("1-4", float_weights=fw, engine_weights="embedded"))
             for fw in ("checkpoint", "float32")}
    for fw, size in (("checkpoint", 2), ("float32", 4)):
        (engine,) = built[fw]["engines"]
        assert engine["weights"]["bytes"] == 2 * n * size
        assert engine["decode_bytes_per_token"] == n * size + 256 * size
        # What TensorRT-RTX wrote holds those weights and little else (kernels, metadata).
        assert 2 * n * size <= engine["bytes"] <= 2 * n * size + (1 << 20), (fw, engine["bytes"])
        assert built[fw]["size"]["engine_bytes"] == engine["bytes"]
        assert built[fw]["float_weights"] == fw
    assert built["checkpoint"]["engines"][0]["bf16_float_weights"] == ["embed.weight", "lm_head.weight"]
    assert built["float32"]["engines"][0]["bf16_float_weights"] == []


def test_shared_engines_hold_no_weights_and_name_one_weights_file(tmp_path):
    """--engine-weights shared (the default): the weights are engine inputs, every profile's engine
    is small, and the one weights file the manifest names (with its sha256) holds the weights."""
    n = _embedding_and_head(tmp_path / "head.onnx")
    manifest = build_engines(tmp_path / "head.onnx", tmp_path / "out", _options("1-4,5-64"))
    assert manifest["engine_weights"] == "shared"
    (weights,) = manifest["weights_files"]
    data = tmp_path / "out" / weights["file"]
    assert weights["bytes"] == data.stat().st_size >= 2 * n * 2  # both tables, bf16
    assert weights["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    for engine in manifest["engines"]:
        assert engine["bytes"] < 2 * n * 2 // 4, engine["bytes"]  # no copy of the weights
        assert engine["weight_inputs"] == 2 and engine["weights_file"]["file"] == weights["file"]
    assert manifest["size"]["total_bytes"] == manifest["size"]["engine_bytes"] + weights["bytes"]


def test_zero_point_engine_keeps_int4_weights(tmp_path):
    """W4A16 with zero points, weights embedded: the engine is about the INT4 weights' size."""
    k, n = 1024, 2048
    chain = projection_graph(k, [Proj("W4A16Proj", n, options={"group_size": 128, "symmetric": False})], seed=2)
    onnx.save(chain.model, tmp_path / "zp.onnx")
    manifest = build_engines(tmp_path / "zp.onnx", tmp_path / "out", _options("1-8", engine_weights="embedded"))
    (engine,) = manifest["engines"]
    int4 = k * n // 2
    assert int4 <= engine["bytes"] <= int4 * 1.5, engine["bytes"]  # INT8 would be twice int4


@pytest.mark.slow
def test_a_build_beyond_the_memory_available_is_refused_up_front(chain_path, tmp_path, monkeypatch):
    """The estimate against METRALE_AVAILABLE_MEMORY: exit 2, one line with the numbers, nothing built."""
    from click.testing import CliRunner

    from metrale_export.cli.main import cli

    out = tmp_path / "engines"
    monkeypatch.setenv("METRALE_AVAILABLE_MEMORY", "100M")
    result = CliRunner().invoke(cli, ["build", str(chain_path), "-o", str(out), "--backend", "tensorrt-rtx",
                                      "--profiles", "1,2-8"])
    assert result.exit_code == 2, result.output
    assert "of memory at its peak" in result.output and "0.1 GiB is available (METRALE_AVAILABLE_MEMORY)" \
        in result.output
    assert not out.exists() or not list(out.rglob("*.engine"))
    monkeypatch.setenv("METRALE_AVAILABLE_MEMORY", "64G")
    result = CliRunner().invoke(cli, ["build", str(chain_path), "-o", str(out), "--backend", "tensorrt-rtx",
                                      "--profiles", "1"])
    assert result.exit_code == 0, result.output
