"""The build plan, piece by piece, with no TensorRT and no files: keys, refusals, reuse, removals."""

import json
from pathlib import Path

import pytest

from metrale_export.engines import backends, manifest
from metrale_export.engines.nodes import OpInfo
from metrale_export.engines.plan import (
    BuildOptions, Source, UsageConflict, resolve_max_context, choose_backend, graph_file, plan_build,
    profile_formats, removals, reusable,
)
from metrale_export.engines.policy import parse_policy
from metrale_export.engines.profiles import parse_profiles
from metrale_export.errors import InputError

OPS = [OpInfo("layers.0.attn.q", "W4A16Proj", "attn", "bf16", 64, 64),
       OpInfo("layers.0.ffn.up", "W8A8Proj", "ffn", "fp8", 64, 64),
       OpInfo("lm_head", "W4A4Proj", "head", "nvfp4", 64, 64)]
RTX = ("tensorrt-rtx", "1.7.1.116")


def _source(sha="s" * 64, model_max=None, inputs=None):
    return Source(Path("/x/model.onnx"), {"model": {"max_position_embeddings": model_max}} if model_max else None,
                  [Path("/x/model.onnx")], OPS, inputs or {"x": ["M", 64]}, sha)


def _options(spec="1,2-8,9-32,33-128", policy="declared", **kw):
    return BuildOptions(parse_profiles(spec), parse_policy(policy), **kw)


def _plan(options=None, source=None, backend=RTX, **kw):
    return plan_build(source or _source(), Path("/out"), options or _options(), backend, **kw)


def test_choose_backend():
    assert choose_backend("tensorrt-rtx", {}) == "tensorrt-rtx"
    assert choose_backend(None, {"tensorrt": "10.1", "tensorrt-rtx": "1.7"}) == "tensorrt"
    assert choose_backend(None, {"tensorrt": None, "tensorrt-rtx": "1.7"}) == "tensorrt-rtx"
    with pytest.raises(backends.BackendMissing, match="no TensorRT backend is installed"):
        choose_backend(None, {"tensorrt": None, "tensorrt-rtx": None})


def test_max_context_against_the_model():
    assert resolve_max_context(1024, 1024, Path("m.json")) == 1024
    assert resolve_max_context(8192, None, Path("m.json")) == 8192
    assert resolve_max_context(None, None, Path("m.json")) == 4096
    assert resolve_max_context(None, 512, Path("m.json")) == 512  # a small model is not refused
    assert resolve_max_context(None, 40960, Path("m.json")) == 4096
    with pytest.raises(UsageConflict, match=r"max_position_embeddings \(1024, m.json\)") as e:
        resolve_max_context(2048, 1024, Path("m.json"))
    assert e.value.param == "--max-context"


def test_default_profiles_end_at_the_context():
    """No --profiles: the default ranges are cut to the engines' context, never refused."""
    options = BuildOptions(None, parse_policy("declared"))
    rows = [s.rows.label for s in _plan(options, _source(model_max=2048)).steps]
    assert rows == ["1", "2-8", "9-32", "33-128", "129-2048"]
    rows = [s.rows.label for s in _plan(options, _source(model_max=64)).steps]
    assert rows == ["1", "2-8", "9-32", "33-64"]
    assert [s.rows.label for s in _plan(options, _source()).steps][-1] == "129-4096"
    # Ranges the user wrote are kept as written.
    assert [s.rows.label for s in _plan(_options("1,2-4096"), _source(model_max=2048)).steps] == ["1", "2-4096"]


def test_profile_formats_refuse_every_projection_at_once():
    profiles = parse_profiles("1,2-64")
    assert profile_formats(parse_policy("declared"), OPS, profiles)[1] == {
        "layers.0.attn.q": "bf16", "layers.0.ffn.up": "fp8", "lm_head": "nvfp4"}
    adaptive = profile_formats(parse_policy("adaptive"), OPS, profiles)
    assert adaptive[0]["layers.0.ffn.up"] == "bf16" and adaptive[1]["layers.0.ffn.up"] == "fp8"
    with pytest.raises(InputError) as e:
        profile_formats(parse_policy("fp8"), OPS, profiles)
    text = str(e.value)
    assert "2 projection(s)" in text and "layers.0.attn.q (W4A16Proj, family attn; every profile)" in text
    assert "lm_head (W4A4Proj" in text


def test_keys_follow_what_the_engine_depends_on():
    base = _plan()
    keys = [s.key for s in base.steps]
    assert len(set(keys)) == 4
    assert [s.key for s in _plan().steps] == keys  # deterministic
    changed = {
        "source": _plan(source=_source(sha="t" * 64)),
        "policy": _plan(_options(policy="bf16")),
        "backend version": _plan(backend=("tensorrt-rtx", "1.8")),
        "targets": _plan(_options(rtx_targets=((12, 0),))),
        "float weights": _plan(_options(float_weights="float32")),
        "max context": _plan(source=_source(inputs={"input_ids": ["batch", "seq"],
                                                    "position_ids": ["batch", "seq"]}),
                             options=_options(max_context=256)),
    }
    for what, plan in changed.items():
        assert all(a.key != b.key for a, b in zip(plan.steps, base.steps)), what
    # one range changed: only its key changes
    other = _plan(_options("1,2-8,9-32,33-64"))
    assert [s.key for s in other.steps][:3] == keys[:3] and other.steps[3].key != keys[3]


def test_one_lowered_graph_per_distinct_formats():
    assert len({s.graph for s in _plan().steps}) == 1
    adaptive = _plan(_options(policy="adaptive"))
    assert len({s.graph for s in adaptive.steps}) == 2
    assert graph_file("qdq", {"a": "bf16"}, "s") != graph_file("qdq", {"a": "fp8"}, "s")
    assert graph_file("qdq", {"a": "bf16"}, "s").startswith("onnx/qdq-")


def test_reuse_needs_the_same_key_file_and_bytes():
    first = _plan()
    entries = [{"key": s.key, "file": s.file, "sha256": "h" + s.file, "onnx": s.graph} for s in first.steps]
    on_disk = {e["file"]: e["sha256"] for e in entries}
    on_disk["rows-2-8.engine"] = "edited"  # a changed file is rebuilt
    del on_disk["rows-9-32.engine"]  # a missing one too
    again = _plan(previous=entries, engine_sha=on_disk.get)
    assert [s.action for s in again.steps] == ["skip", "build", "build", "skip"]
    assert again.steps[0].reuse is entries[0]
    assert [s.rows.label for s in again.to_build] == ["2-8", "9-32"]
    assert reusable({"file": "a", "sha256": "x"}, "a", "x")
    assert not reusable({"file": "a", "sha256": "x"}, "b", "x")
    assert not reusable(None, "a", "x")


def test_removals_name_what_no_engine_keeps():
    plan = _plan(_options("1,2-8"))
    previous = [{"file": "rows-1.engine"}, {"file": "rows-9-32.engine"}, {"file": "rows-33-128.engine"}]
    graph = plan.steps[0].graph
    on_disk = [graph, "onnx/qdq-old.onnx", "onnx/qdq-old.onnx.data", graph + ".data"]
    assert removals(previous, plan.steps, on_disk) == (
        "rows-9-32.engine", "rows-33-128.engine", "onnx/qdq-old.onnx", "onnx/qdq-old.onnx.data")
    full = _plan(_options("1,2-8"), previous=previous, lowered_on_disk=on_disk)
    assert full.removals == ("rows-9-32.engine", "rows-33-128.engine", "onnx/qdq-old.onnx",
                             "onnx/qdq-old.onnx.data")


def test_backend_specific_parts():
    rtx = _plan(_options(rtx_targets=((8, 9), (12, 0))))
    assert rtx.targets == ("8.9", "12.0") and rtx.timing_cache is None
    assert rtx.lowering == "qdq" and rtx.promised is False
    trt = _plan(backend=("tensorrt", "10.9"))
    assert trt.targets == ("build machine",) and trt.timing_cache == Path("/out/timing.cache")
    with pytest.raises(UsageConflict, match="no IPluginV3 layers") as e:
        _plan(_options(lowering="plugin", plugins=Path("/lib.so")))
    assert e.value.param == "--lowering"
    with pytest.raises(UsageConflict, match="--float-weights 'fp16': expected one of checkpoint, float32"):
        _plan(_options(float_weights="fp16"))


def test_fp8_weights_need_sm89_with_tensorrt_rtx():
    with pytest.raises(UsageConflict, match=r"--rtx-target 8\.6: the qdq lowering stores W4A4Proj and "
                                            r"W8A8Proj weights as FP8") as e:
        _plan(_options(rtx_targets=((8, 6), (12, 0))))
    assert e.value.param == "--rtx-target"
    w4a16_only = _source()
    w4a16_only.ops = OPS[:1]
    assert _plan(_options(rtx_targets=((8, 6),)), source=w4a16_only).targets == ("8.6",)
    assert _plan(_options(rtx_targets=((8, 9),))).targets == ("8.9",)


def test_manifest_document_round_trips_through_the_reader(tmp_path):
    plan = plan_build(_source(), tmp_path, _options("1,2-8"), RTX)
    step = plan.steps[1]
    numbers = {"weights": {"bytes": 4, "by_dtype": {"bfloat16": 4}}, "decode_bytes_per_token": 3,
               "kv_cache_bytes_per_position": 2, "fixed_state_bytes": 1, "bf16_float_weights": ["w"],
               "weights_file": {"file": "onnx/g.onnx.data", "bytes": 10, "sha256": "ab", "tensors": 1},
               "weight_inputs": 1}
    entry = manifest.engine_entry(plan, step, memoryview(b"engine"), 1.5, numbers)
    written = manifest.write(tmp_path, manifest.document(plan, [entry, dict(entry, file="other")], complete=True))
    assert written["size"] == {"engine_bytes": 12, "weights_file_bytes": 10, "total_bytes": 22,
                               "largest_engine_bytes": 6, "weight_bytes": 4,
                               "decode_bytes_per_token": 3, "kv_cache_bytes_per_position": 2,
                               "fixed_state_bytes": 1}
    # one weights file named once with its hash, however many engines use it
    assert written["weights_files"] == [{"file": "onnx/g.onnx.data", "graph": step.graph, "bytes": 10,
                                         "sha256": "ab", "tensors": 1}]
    assert written["engine_weights"] == "shared" and entry["weight_inputs"] == 1
    written = manifest.write(tmp_path, manifest.document(plan, [entry], complete=True))
    assert written["float_weights"] == "checkpoint"
    assert manifest.load(tmp_path) == written == json.loads((tmp_path / "manifest.json").read_text())
    assert written["engines"][0]["bytes"] == 6 and written["engines"][0]["onnx"] == step.graph
    assert manifest.previous_engines(tmp_path) == [entry]
    # a reader that cannot trust the file reuses nothing; the runners' reader says why
    (tmp_path / "manifest.json").write_text("{")
    assert manifest.previous_engines(tmp_path) == []
    with pytest.raises(InputError, match="not valid JSON"):
        manifest.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({**written, "manifest_version": 0}))
    assert manifest.previous_engines(tmp_path) == []
    with pytest.raises(InputError, match="expected manifest_version 1, found 0"):
        manifest.load(tmp_path)


def test_kernel_limits_name_every_node_at_once():
    from types import SimpleNamespace

    from metrale_export.engines.plan import check_kernel_limits, kernel_limits_check

    ops = [SimpleNamespace(key=key, op_type="W4A16Proj", k=k) for key, k in (("a", 400), ("b", 416), ("c", 80))]
    ok, reasons = kernel_limits_check(ops)
    assert not ok and [r.split(" ")[1] for r in reasons] == ["a", "c"]
    with pytest.raises(InputError) as e:
        check_kernel_limits(ops)
    assert "\n" not in str(e.value) and str(e.value).endswith("export it with another weight format")
