"""The streaming comparison (compare/segments.py, compare/streaming.py): the graph cut into the
embedding, each decoder layer and the head covers every node once and in order; run segment by
segment it gives the report of the whole-graph run, number for number; and it holds at most two
decoder layers' PyTorch weights at once, whatever the depth."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from safetensors.torch import save_file

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.compare.accuracy import Case, compare_export
from metrale_export.compare.segments import plan_segments
from metrale_export.compare.taps import find_taps
from metrale_export.exporter import demo
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.quantization import QuantRequest
from metrale_export.ops.ort import load_graph

CASES = (Case("prefill", 2, 5, 0), Case("decode", 2, 1, 4))


def _export(base, layers: int, fmt: str = "w4a16"):
    cfg = dict(demo.DEMO_CONFIG, num_hidden_layers=layers, hidden_size=128, intermediate_size=256,
               num_attention_heads=2, num_key_value_heads=1)
    (base / "ckpt").mkdir(parents=True)
    (base / "ckpt" / "config.json").write_text(json.dumps(cfg))
    save_file(demo.demo_tensors(cfg), str(base / "ckpt" / "model.safetensors"), metadata={"format": "pt"})
    return export(base / "ckpt", base / fmt, ExportOptions(request=QuantRequest(weight=fmt))).out_dir


@pytest.fixture(scope="module")
def by_depth(tmp_path_factory):
    """W4A16 exports of demo-shaped checkpoints (hidden 128) of 2 and 6 layers."""
    return {n: _export(tmp_path_factory.mktemp(f"depth{n}"), n) for n in (2, 6)}


def _states(n: int) -> dict[int, list[str]]:
    return {i: [f"present_key.{i}", f"present_value.{i}"] for i in range(n)}


def test_segments_cover_the_graph_once_in_order(by_depth):
    graph = load_graph(by_depth[6] / "model.onnx").graph
    taps = find_taps(graph)
    segments = plan_segments(graph, taps, _states(6))
    assert [s.name for s in segments] == ["embedding", *(f"layer {i}" for i in range(6)), "head"]
    nodes = [j for s in segments for j in s.nodes]
    assert len(nodes) == len(set(nodes)) == len(graph.node)  # every node of this graph is needed
    for s in segments:
        assert list(s.nodes) == sorted(s.nodes)
    available = {v.name for v in graph.input}
    for s in segments:
        assert set(s.inputs) <= available, (s.name, set(s.inputs) - available)
        available |= set(s.outputs)
    assert {o.name for o in graph.output} <= available
    # Each layer segment computes its own ops, its residual output and its states.
    for i in range(6):
        seg = segments[i + 1]
        produced = {o for j in seg.nodes for o in graph.node[j].output}
        assert {t.y for t in taps.ops if t.layer == i} <= produced
        assert {taps.layers[i].x_out, f"present_key.{i}", f"present_value.{i}"} <= produced


def test_a_graph_without_layers_is_not_cut(by_depth):
    graph = load_graph(by_depth[2] / "model.onnx").graph
    taps = find_taps(graph)
    taps.layers, taps.reason = {}, "expected one Gather of the embedding"
    assert plan_segments(graph, taps, _states(2)) == "expected one Gather of the embedding"


def _same_report(a, b):
    ja, jb = json.loads(a.to_json()), json.loads(b.to_json())
    for key in ("ok", "first_failure", "rows", "ops", "layers"):
        assert ja[key] == jb[key], key


def test_streamed_report_equals_the_whole_graph_run(by_depth):
    streamed = compare_export(by_depth[6], cases=CASES)
    whole = compare_export(by_depth[6], cases=CASES, streaming=False)
    assert streamed.run["mode"] == "streamed" and streamed.run["segments"] == 8
    assert whole.run["mode"] == "whole-graph"
    # Per layer 4 (fused) projections, 4 RMSNorms (one fusing the residual add) and the Attention;
    # then the head's final norm and lm_head (FloatProj): every op checked in both cases.
    assert streamed.ok and len(streamed.ops) == (9 * 6 + 2) * 2 and len(streamed.layers) == 3 * 6 * 2
    assert {r.op_type for r in streamed.ops if r.layer is None} == {"RMSNorm", "FloatProj"}
    _same_report(streamed, whole)


@pytest.mark.parametrize("fmt", ["none", "w8a8", "w4a4"])
def test_streamed_report_equals_the_whole_graph_run_on_the_demo(demo_exports, fmt):
    streamed = compare_export(demo_exports[fmt])
    assert streamed.run["mode"] == "streamed"
    _same_report(streamed, compare_export(demo_exports[fmt], streaming=False))


def test_resident_layers_do_not_grow_with_depth(by_depth):
    peaks = {n: compare_export(d, cases=CASES).run["resident_layers_peak"] for n, d in by_depth.items()}
    # The layer being compared and, at most, the next one being read: whatever the depth (1 when the
    # read-ahead ends after the layer before it was released).
    assert all(1 <= p <= 2 for p in peaks.values()), peaks
    assert compare_export(by_depth[6], cases=CASES, streaming=False).run["resident_layers_peak"] == 6


def test_progress_on_stderr_only_without_json_or_quiet(by_depth):
    runner = CliRunner()
    r = runner.invoke(cli, ["compare", str(by_depth[2])])
    assert r.exit_code == 0, r.output
    assert "comparing" in r.stderr and "segment" in r.stderr
    r = runner.invoke(cli, ["compare", str(by_depth[2]), "--json"])
    assert r.exit_code == 0
    assert "comparing" not in r.stderr
    report = json.loads(r.stdout)
    assert report["run"]["mode"] == "streamed" and report["run"]["segments"] == 4
    assert 1 <= report["run"]["resident_layers_peak"] <= 2


def test_a_layer_boundary_at_a_fused_norm_is_followed():
    """A layer whose last residual add is fused into the next layer's input RMSNorm
    (``has_residual``): the stream goes on from the norm's residual_out, the boundary is that value,
    and the next layer's segment reads every value of its norm's check from the one before."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    def w(name, *shape):
        return numpy_helper.from_array(np.ones(shape, np.float32), name)

    inits = [w("model.embed_tokens.weight", 10, 4), w("model.layers.0.a.weight", 4, 4),
             w("model.layers.1.input_layernorm.weight", 4), w("model.layers.1.b.weight", 4, 4),
             w("model.norm.weight", 4)]
    norm = dict(domain=contract.DOMAIN, k=4, epsilon=1e-6)
    nodes = [
        helper.make_node("Gather", ["model.embed_tokens.weight", "ids"], ["h0"], name="embed"),
        helper.make_node("MatMul", ["h0", "model.layers.0.a.weight"], ["b0"], name="a"),
        helper.make_node("RMSNorm", ["b0", "model.layers.1.input_layernorm.weight", "h0"], ["n1", "h1"],
                         name="fused", has_residual=1, **norm),
        helper.make_node("MatMul", ["n1", "model.layers.1.b.weight"], ["b1"], name="b"),
        helper.make_node("Add", ["h1", "b1"], ["h2"], name="add"),
        helper.make_node("RMSNorm", ["h2", "model.norm.weight"], ["y"], name="final", **norm),
    ]
    for n, checkpoint in ((nodes[2], "model.layers.1.input_layernorm"), (nodes[5], "model.norm")):
        n.attribute.append(helper.make_attribute("name", checkpoint))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    taps = find_taps(graph)
    assert not taps.reason
    assert {i: (t.x_in, t.x_out) for i, t in taps.layers.items()} == {0: ("h0", "h1"), 1: ("h1", "h2")}
    segments = plan_segments(graph, taps, {})
    assert [s.name for s in segments] == ["embedding", "layer 0", "layer 1", "head"]
    layer0, layer1, head = segments[1], segments[2], segments[3]
    assert [graph.node[j].name for j in layer0.nodes] == ["a", "fused"]  # the stream's step is layer 0's
    assert {"h1", "n1", "b0"} <= set(layer0.outputs)
    assert {"h0", "b0", "n1", "h1"} <= set(layer1.inputs)  # the fused norm's check reads them all
    assert [graph.node[j].name for j in head.nodes] == ["final"] and "h2" in head.inputs


def test_kept_onnx_runtime_values_own_their_memory(by_depth, monkeypatch):
    """ONNX Runtime's output arrays are views of its buffers: a kept one holds its session's whole CPU
    arena. The values kept past a segment (the graph outputs kept to the end) are copies, so each
    segment's arena goes with its session (otherwise one arena a layer stays: +22 MiB a layer at 32B)."""
    from metrale_export.compare import streaming

    kept = []
    run = streaming.run_segments
    monkeypatch.setattr(streaming, "run_segments", lambda *a, **k: kept.append(run(*a, **k)) or kept[-1])
    assert compare_export(by_depth[6], cases=CASES).run["mode"] == "streamed"
    arrays = [a for case in kept[0].ort_out.values() for a in case.values()]
    assert len(arrays) == (1 + 2 * 6) * len(CASES)  # logits and each layer's presents, per case
    assert all(a.base is None and a.flags.owndata for a in arrays), {type(a.base) for a in arrays}
