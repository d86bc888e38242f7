"""The lowered graph written to disk a tensor at a time (engines/weights_file.py), and the build's
up-front memory and disk check (engines/resources.py). No TensorRT needed."""

import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx.external_data_helper import uses_external_data

from metrale_export.engines import resources
from metrale_export.engines.build import LoweredGraphFromOnnx, shared_graph
from metrale_export.engines.lowering import lower_qdq
from metrale_export.engines.plan import check_engine_weights, lowered_graph_of, UsageConflict
from metrale_export.engines.weights import float_weights_in_bf16
from metrale_export.engines.weights_file import ALIGN, INLINE_BYTES
from support.graphs import Proj, head_graph, projection_graph

GiB = 1 << 30


def _external_source(tmp_path):
    """A chain of every weight format whose weights are external data, as a large export's are."""
    chain = projection_graph(160, [Proj("W4A16Proj", 96, options={"group_size": 32, "symmetric": False}),
                                   Proj("W8A8Proj", 64, bias=True), Proj("W4A4Proj", 48)], seed=5)
    src = tmp_path / "src" / "model.onnx"
    src.parent.mkdir()
    onnx.save_model(chain.model, str(src), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)
    return chain, src


def _run(model_or_path, x):
    s = ort.InferenceSession(str(model_or_path) if not isinstance(model_or_path, onnx.ModelProto)
                             else model_or_path.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def test_lowered_from_disk_is_the_lowered_graph_in_memory(tmp_path):
    chain, src = _external_source(tmp_path)
    (tmp_path / "src" / "model.onnx.data").link_to(tmp_path / "linked.data")  # an export shared by a hard link
    out = tmp_path / "engines" / "onnx" / "qdq-test.onnx"
    numbers = LoweredGraphFromOnnx(src, "qdq", None, "checkpoint", out, shared=True)()
    data = out.with_name(out.name + ".data")
    # one weights file, named with its size and sha256; every tensor that is not tiny lives there
    assert numbers["weights_file"]["file"] == "onnx/qdq-test.onnx.data"
    assert numbers["weights_file"]["bytes"] == data.stat().st_size
    assert numbers["weights_file"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    header = onnx.load(str(out), load_external_data=False)
    for t in header.graph.initializer:
        if uses_external_data(t):
            info = {e.key: e.value for e in t.external_data}
            assert info["location"] == data.name and int(info["offset"]) % ALIGN == 0
        else:
            assert len(t.raw_data) < INLINE_BYTES, t.name
    assert sum(uses_external_data(t) for t in header.graph.initializer) == numbers["weight_inputs"] > 0
    # the same graph, bit for bit in ONNX Runtime, as lowering the fully loaded source in memory
    x = np.random.default_rng(0).standard_normal((7, 160)).astype(np.float32)
    (tmp_path / "linked.data").unlink()  # onnx's own loader refuses hard-linked data
    expected, _ = float_weights_in_bf16(lower_qdq(onnx.load(str(src))))
    assert np.array_equal(_run(out, x), _run(expected, x))
    # the shared header: the same weights as graph inputs of the same name, dtype and shape
    shared = onnx.load(str(shared_graph(out)), load_external_data=False)
    inputs = {i.name: i for i in shared.graph.input}
    for t in header.graph.initializer:
        if uses_external_data(t):
            vi = inputs[t.name].type.tensor_type
            assert vi.elem_type == t.data_type and [d.dim_value for d in vi.shape.dim] == list(t.dims)
    assert not any(uses_external_data(t) for t in shared.graph.initializer)


def test_zero_point_weights_stay_int4(tmp_path):
    """W4A16 with zero points lowers to INT4 codes and a float offset per group, not INT8."""
    chain = projection_graph(256, [Proj("W4A16Proj", 128, options={"group_size": 64, "symmetric": False})], seed=1)
    lowered = lower_qdq(chain.model)
    kinds = {onnx.TensorProto.DataType.Name(t.data_type) for t in lowered.graph.initializer
             if len(t.dims) == 2 and t.dims[0] * t.dims[1] == 256 * 128}
    assert kinds == {"INT4"}


def test_lowered_graph_files_belong_to_their_graph():
    g = "onnx/qdq-abc.onnx"
    assert {lowered_graph_of(r) for r in (g, g + ".data", "onnx/qdq-abc.shared.onnx")} == {g}


def test_stripped_engines_need_a_cuda_driver_with_tensorrt_rtx():
    with pytest.raises(UsageConflict, match="CUDA driver") as e:
        check_engine_weights("stripped", "tensorrt-rtx", cuda_driver=False)
    assert e.value.param == "--engine-weights"
    check_engine_weights("stripped", "tensorrt-rtx", cuda_driver=True)
    check_engine_weights("stripped", "tensorrt", cuda_driver=False)  # TensorRT itself needs a GPU anyway
    check_engine_weights("shared", "tensorrt-rtx", cuda_driver=False)
    with pytest.raises(UsageConflict, match="expected one of shared, stripped, embedded"):
        check_engine_weights("both", "tensorrt", cuda_driver=True)


def test_estimate_grows_with_the_weights_the_builder_holds():
    args = dict(backend="tensorrt-rtx", weight_bytes=6 * GiB, largest_op_weights=50_000_000, engines=5, graphs=1)
    shared, embedded = (resources.estimate_build(mode, **args) for mode in ("shared", "embedded"))
    assert shared.memory < embedded.memory and shared.disk < embedded.disk
    assert embedded.memory > 3 * 6 * GiB  # the parsed weights, the engine's copy, the plan
    assert shared.disk >= 6 * GiB  # the weights file, once


def test_refusal_names_the_numbers():
    est = resources.Estimate(memory=12 * GiB, disk=GiB, parts={"lowering": GiB, "tensorrt-rtx builder": 12 * GiB})
    line = resources.machine_check(est, (8 * GiB, "MemAvailable in /proc/meminfo"), (100 * GiB, "free")).message
    assert "12.0 GiB of memory" in line and "8.0 GiB is available (MemAvailable" in line and "\n" not in line
    assert resources.machine_check(est, (16 * GiB, "x"), (100 * GiB, "free")).ok
    assert "writes about 1.0 GiB and 0.5 GiB is free" in resources.machine_check(
        est, (16 * GiB, "x"), (GiB // 2, "free")).message
    assert resources.machine_check(est, (None, "unknown"), (None, "unknown")).ok


def test_too_little_memory_and_disk_are_both_named(tmp_path, monkeypatch):
    est = resources.Estimate(memory=12 * GiB, disk=GiB, parts={"lowering": GiB, "tensorrt-rtx builder": 12 * GiB})
    ok, reasons = resources.machine_check(est, (8 * GiB, "x"), (GiB // 2, "free"))
    assert not ok and len(reasons) == 2 and "of memory" in reasons[0] and "is free" in reasons[1]
    monkeypatch.setattr(resources, "available_memory", lambda: (8 * GiB, "x"))
    monkeypatch.setattr(resources, "available_disk", lambda where: (GiB // 2, "free"))
    with pytest.raises(resources.ResourceError) as e:
        resources.check(est, tmp_path)
    assert str(e.value) == f"{tmp_path}: {reasons[0]}; {reasons[1]}"


def test_available_memory_can_be_given(monkeypatch):
    monkeypatch.setenv(resources.MEMORY_ENV, "1.5G")
    assert resources.available_memory() == (int(1.5 * GiB), resources.MEMORY_ENV)
    monkeypatch.setenv(resources.MEMORY_ENV, "512M")
    assert resources.available_memory()[0] == 512 << 20
    monkeypatch.delenv(resources.MEMORY_ENV)
    found, where = resources.available_memory()
    assert found > 0 and "MemAvailable" in where
    with pytest.raises(resources.InputError, match="METRALE_AVAILABLE_MEMORY='lots'"):
        resources.parse_bytes("lots", resources.MEMORY_ENV)


def test_float_tables_in_the_source_files_become_bf16_in_the_weights_file(tmp_path):
    """An embedding and lm_head stored as external float32 (a large export's): converted to
    bfloat16 in chunks, the same values as the in-memory conversion."""
    vocab, hidden = 300, 64
    model = head_graph(vocab, hidden, seed=3)
    src = tmp_path / "src" / "model.onnx"
    src.parent.mkdir()
    onnx.save_model(model, str(src), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    out = tmp_path / "onnx" / "plugin-x.onnx"
    numbers = LoweredGraphFromOnnx(src, "plugin", {}, "checkpoint", out)()
    assert numbers["bf16_float_weights"] == ["embed.weight", "lm_head.weight"]
    assert numbers["weights_file"]["bytes"] >= 2 * vocab * hidden * 2
    # ONNX Runtime has no bfloat16 MatMul: compare the graphs and the tensors themselves
    expected, _ = float_weights_in_bf16(onnx.load(str(src)))
    got = onnx.load(str(out))
    assert [n.op_type for n in got.graph.node] == [n.op_type for n in expected.graph.node]
    tensors = {t.name: onnx.numpy_helper.to_array(t) for t in expected.graph.initializer}
    assert {t.name for t in got.graph.initializer} == set(tensors)
    for t in got.graph.initializer:
        assert np.array_equal(onnx.numpy_helper.to_array(t).view(np.uint16), tensors[t.name].view(np.uint16))


def test_a_float_weight_already_in_the_weights_file_becomes_bf16_from_there(tmp_path):
    """A float table the lowering itself wrote to the weights file (an expansion's FloatProj weight):
    read back from that file, not from the source's directory (where it was looked for: the
    demo model's qdq build failed with 'qdq-<hash>.onnx.data: No such file or directory')."""
    from metrale_export.engines.weights_file import WeightsFile

    vocab, hidden = 300, 64
    model = head_graph(vocab, hidden, seed=4)
    expected, _ = float_weights_in_bf16(onnx.ModelProto.FromString(model.SerializeToString()))
    (tmp_path / "src").mkdir()
    store = WeightsFile(tmp_path / "onnx" / "qdq-x.onnx.data", tmp_path / "src")  # nothing in src
    for t in model.graph.initializer:
        store.write_tensor(t)
    got, converted = float_weights_in_bf16(model, store)
    store.close()
    assert converted == ["embed.weight", "lm_head.weight"]
    onnx.save(got, str(tmp_path / "onnx" / "qdq-x.onnx"))
    got = onnx.load(str(tmp_path / "onnx" / "qdq-x.onnx"))
    tensors = {t.name: onnx.numpy_helper.to_array(t) for t in expected.graph.initializer}
    assert {t.name for t in got.graph.initializer} == set(tensors)
    for t in got.graph.initializer:
        assert np.array_equal(onnx.numpy_helper.to_array(t).view(np.uint16), tensors[t.name].view(np.uint16))


def _dead_bytes(header: onnx.ModelProto, data_bytes: int) -> int:
    """Bytes of the weights file that no initializer names, alignment padding left out."""
    spans = sorted((int(i["offset"]), int(i["length"])) for t in header.graph.initializer
                   if uses_external_data(t) for i in [{e.key: e.value for e in t.external_data}])
    dead, end = 0, 0
    for offset, length in spans:
        gap = offset - end
        dead += gap if gap >= ALIGN else 0
        end = max(end, offset + length)
    return dead + (data_bytes - end)


@pytest.mark.parametrize("float_weights", ["checkpoint", "float32"])
def test_the_weights_file_holds_only_the_lowered_graphs_tensors(demo_exports, tmp_path, float_weights):
    """The qdq expansion of the FloatProj lm_head makes its transposed weight in float32; turned into
    bfloat16 afterwards, the float32 copy stayed in the weights file as dead bytes (at 8B: 2.37 GB of
    8.9 GB). Every byte of the file now belongs to a tensor of the lowered graph, in both float modes."""
    out = tmp_path / "engines" / "onnx" / "qdq-demo.onnx"
    numbers = LoweredGraphFromOnnx(demo_exports["w4a16"] / "model.onnx", "qdq", None, float_weights, out)()
    header = onnx.load(str(out), load_external_data=False)
    assert bool([c for c in numbers["bf16_float_weights"] if c.startswith("lm_head/w_")]) == (
        float_weights == "checkpoint")
    assert _dead_bytes(header, numbers["weights_file"]["bytes"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["qdq-demo.onnx", "qdq-demo.onnx.data"]  # no scratch left
