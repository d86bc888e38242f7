"""The row-invariance audit: what the promise covers, what it leaves to TensorRT, and when an engine
manifest may say ``promised: true``."""

import json

from click.testing import CliRunner
from onnx import TensorProto, helper

from metrale_export import contract
from metrale_export.cli.main import cli
from support.graphs import Proj, projection_graph
from metrale_export.exporter.demo import DEMO_CONFIG
from metrale_export.invariance import PROJECTIONS_ONLY, audit, describe_left, engine_promise

FIXED = "declared: every engine runs the same format per op"


def test_demo_export_lists_its_attention_and_norm_ops(demo_exports):
    """Qwen3 per layer: 7 projections covered; the metrale Attention and the input, q, k and
    post-attention metrale RMSNorms, then the final norm and the lm_head FloatProj: covered when the
    contract gives the op a plugin, else left (the plugin lowering expands them)."""

    out = demo_exports["w4a16"]
    r = CliRunner().invoke(cli, ["inspect", str(out), "--json"])
    assert r.exit_code == 0, r.output
    ri = json.loads(r.output)["row_invariance"]
    layers = DEMO_CONFIG["num_hidden_layers"]
    counts = {"Attention": layers, "RMSNorm": 4 * layers + 1, "FloatProj": 1}
    kinds = {"Attention": "attention", "RMSNorm": "norm", "FloatProj": "float projection"}
    plugin = {t: contract.op(t).has_plugin for t in counts}
    assert len(ri["covers"]) == 4 * layers + sum(n for t, n in counts.items() if plugin[t])  # 4 fused projections
    assert {c["name"] for c in ri["covers"]} >= {"model.layers.0.self_attn.qkv_proj", "model.layers.1.mlp.down_proj"}
    assert ri["left_by_kind"] == {kinds[t]: n for t, n in counts.items() if not plugin[t]}
    left = ri["left_to_tensorrt"]
    for layer in range(layers):
        here = [e for e in left if e["where"] == f"model.layers.{layer}"]
        assert [(e["op_type"], e.get("expanded")) for e in here if e["kind"] == "attention"] == \
            ([] if plugin["Attention"] else [("Attention", "no TensorRT plugin yet")])
        assert [e["op_type"] for e in here if e["kind"] == "norm"] == ([] if plugin["RMSNorm"] else ["RMSNorm"] * 4)
    tail = [e for e in left if e["where"] == "model"]
    assert [(e["kind"], e["op_type"]) for e in tail] == \
        [(kinds[t], t) for t in ("RMSNorm", "FloatProj") if not plugin[t]]
    assert all("no TensorRT plugin" in e["expanded"] for e in left if e["op_type"] in ("RMSNorm", "FloatProj"))
    # The export's manifest says the same; inspect adds what the plugin lowering's engines promise.
    manifest = json.loads((out / "manifest.json").read_text())
    assert {k: v for k, v in manifest["row_invariance"].items() if k != "applies_to"} == \
        {k: v for k, v in ri.items() if k not in ("applies_to", "promised", "scope")}
    assert ri["promised"] is (not left) and ri["scope"] == ("whole graph" if not left else PROJECTIONS_ONLY)

    text = CliRunner().invoke(cli, ["inspect", str(out)]).output
    assert f"covers the outputs of {len(ri['covers'])} metrale " in text
    assert f"promised: {'true' if not left else 'false'}" in text
    assert plugin["Attention"] or f"{layers} attention (Attention)" in text
    assert plugin["RMSNorm"] or f"{4 * layers + 1} norm (RMSNorm)" in text


def test_with_their_plugins_nothing_row_sensitive_is_left(demo_exports, monkeypatch):
    """With plugins for the norms, the float projection, the router and attention (the contract's
    has_plugin, set here so the test says what it needs), the plugin lowering keeps every metrale op
    and the audit finds no row-sensitive op left to TensorRT: the whole graph is covered."""
    import dataclasses

    import onnx

    from metrale_export.engines import lowering

    for t in ("RMSNorm", "FloatProj", "Router", "Attention"):
        monkeypatch.setitem(contract.OPS, t, dataclasses.replace(contract.OPS[t], has_plugin=True))
    model = onnx.load(str(demo_exports["w4a16"] / "model.onnx"), load_external_data=False)
    formats = {op.key: op.activation_format for op in lowering.metrale_ops(model)}
    lowered = lowering.lower_plugins(model, formats)
    assert {n.op_type for n in lowered.graph.node if n.domain == contract.DOMAIN} == \
        {"W4A16Proj", "RMSNorm", "FloatProj", "Attention"}
    a = audit(lowered.graph)
    assert a["left_by_kind"] == {} and a["left_to_tensorrt"] == []
    assert not [n for n in lowered.graph.node if n.op_type.startswith("Reduce") or n.op_type == "Softmax"]


def test_without_their_plugins_the_plugin_lowering_expands_them(demo_exports, monkeypatch):
    """An op the contract gives no plugin (here: all four non-projection ops, whatever the contract
    says today) is expanded to standard ONNX, and the audit finds its reductions."""
    import dataclasses

    import onnx

    from metrale_export.engines import lowering

    for t in ("RMSNorm", "FloatProj", "Router", "Attention"):
        monkeypatch.setitem(contract.OPS, t, dataclasses.replace(contract.OPS[t], has_plugin=False))
    model = onnx.load(str(demo_exports["w4a16"] / "model.onnx"), load_external_data=False)
    plan = lowering.plugin_plan(model)
    assert {v for v in plan.values()} == {("format", "activation format"),
                                          ("standard", "standard ONNX (no plugin yet)")}
    formats = {op.key: op.activation_format for op in lowering.metrale_ops(model)}
    lowered = lowering.lower_plugins(model, formats)
    assert {n.op_type for n in lowered.graph.node if n.domain == contract.DOMAIN} == {"W4A16Proj"}
    a = audit(lowered.graph)
    assert a["left_by_kind"]["norm"] == 4 * DEMO_CONFIG["num_hidden_layers"] + 1
    assert not [n for n in lowered.graph.node if n.op_type == "Attention"]
    # The expanded attention: 2 MatMul, and the softmax as ReduceMax + ReduceSum (engines/expand.py).
    assert a["left_by_kind"]["attention"] == 2 * DEMO_CONFIG["num_hidden_layers"]
    assert a["left_by_kind"]["reduction"] == 2 * DEMO_CONFIG["num_hidden_layers"]


def test_engine_promise_is_projections_only_while_anything_is_left():
    chain = projection_graph(64, [Proj("W4A16Proj", 32), Proj("W8A8Proj", 32)]).model
    only_projections = audit(chain.graph)
    assert only_projections["left_to_tensorrt"] == [] and len(only_projections["covers"]) == 2
    whole = engine_promise(only_projections, True, FIXED)
    assert whole["promised"] is True and whole["scope"] == "whole graph"

    # The same chain followed by a Softmax over the row's features: left to TensorRT.
    g = chain.graph
    g.node.append(helper.make_node("Softmax", [g.output[0].name], ["probs"], name="head_softmax", axis=-1))
    g.output[0].name = "probs"
    partial = engine_promise(audit(g), True, FIXED)
    assert partial["promised"] is False and partial["scope"] == PROJECTIONS_ONLY
    assert partial["reason"].startswith(PROJECTIONS_ONLY) and "1 attention (Softmax)" in partial["reason"]
    assert partial["covers"] == [c["name"] for c in only_projections["covers"]]

    refused = engine_promise(audit(g), False, "the qdq lowering leaves kernel choice to TensorRT")
    assert refused["promised"] is False and refused["scope"] == "none" and refused["covers"] == []


def test_audit_walks_scan_bodies_and_finds_routing():
    body = helper.make_graph(
        [helper.make_node("MatMul", ["s", "x"], ["y"], name="state_update")], "body",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("s", "x")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Scan", ["s0", "xs"], ["s1", "ys"], name="gdn_scan", body=body, num_scan_inputs=1),
        helper.make_node("TopK", ["logits", "k"], ["vals", "idx"], name="router_topk"),
    ]
    graph = helper.make_graph(nodes, "g", [], [])
    left = audit(graph)["left_to_tensorrt"]
    assert [(e["node"], e["kind"]) for e in left] == [
        ("gdn_scan", "recurrence"), ("gdn_scan/state_update", "recurrence"), ("router_topk", "routing")]


def test_hybrid_plugin_lowering_leaves_no_gdn_reduction_to_tensorrt(hybrid_w4a16_export):
    """The hybrid demo's GDN layers (Qwen3-Next's linear attention): in_proj_ba a FloatProj, the conv
    and the delta rule metrale ops with their plugins (the contract's has_plugin): the plugin
    lowering keeps them and the audit finds nothing left (before: a MatMul, a Conv, ReduceSums and
    a Scan per GDN layer), so inspect and the export's manifest list nothing left to TensorRT and
    inspect says the plugin lowering's engines promise the whole graph."""
    import onnx

    from metrale_export.engines import lowering

    assert contract.op("CausalConv1d").has_plugin and contract.op("GatedDeltaRule").has_plugin
    model = onnx.load(str(hybrid_w4a16_export / "model.onnx"), load_external_data=False)
    formats = {op.key: op.activation_format for op in lowering.metrale_ops(model)}
    # Every metrale node keeps its plugin (projections with their format); none is expanded.
    assert set(lowering.plugin_plan(model).values()) == {("format", "activation format"),
                                                         ("plugin", "plugin as exported")}
    lowered = lowering.lower_plugins(model, formats)
    kept = [n.op_type for n in lowered.graph.node if n.domain == contract.DOMAIN]
    assert kept.count("CausalConv1d") == 2 and kept.count("GatedDeltaRule") == 2
    assert not {"Conv", "Scan", "MatMul", "Gemm", "Softmax", "TopK"} & {n.op_type for n in lowered.graph.node}
    assert not [n for n in lowered.graph.node if n.op_type.startswith("Reduce")]
    a = audit(lowered.graph)
    assert a["left_to_tensorrt"] == [], describe_left(a)
    gdn = [c["name"] for c in a["covers"] if ".linear_attn" in c["name"]]
    assert {"model.layers.0.linear_attn.conv1d", "model.layers.0.linear_attn",
            "model.layers.2.linear_attn.in_proj_ba"} <= set(gdn)
    r = CliRunner().invoke(cli, ["inspect", str(hybrid_w4a16_export), "--json"])
    assert r.exit_code == 0, r.output
    ri = json.loads(r.stdout)["row_invariance"]
    assert ri["left_to_tensorrt"] == [] and ri["left_by_kind"] == {}
    assert ri["promised"] is True and ri["scope"] == "whole graph"
    text = CliRunner().invoke(cli, ["inspect", str(hybrid_w4a16_export), "--no-ops"]).output
    assert "promised: true (scope whole graph)" in text and "left to TensorRT with tactics chosen per profile: " \
        "nothing" in text
    manifest = json.loads((hybrid_w4a16_export / "manifest.json").read_text())
    assert manifest["row_invariance"]["left_by_kind"] == {} and manifest["row_invariance"]["left_to_tensorrt"] == []
    assert {c["name"] for c in manifest["row_invariance"]["covers"]} == {c["name"] for c in ri["covers"]}


def test_hybrid_engines_of_the_plugin_lowering_promise_the_whole_graph(hybrid_w4a16_export, tmp_path):
    """The build plan (no TensorRT run) of the hybrid demo: the plugin lowering with TensorRT and a
    fixed format promises row invariance for the whole graph; the qdq lowering promises nothing."""
    from metrale_export.engines.plan import BuildOptions, plan_build
    from metrale_export.engines.policy import parse_policy
    from metrale_export.engines.profiles import parse_profiles
    from metrale_export.engines.source import resolve_source

    library = tmp_path / "libmetrale_plugins.so"
    library.write_bytes(b"not loaded by the plan")
    source = resolve_source(hybrid_w4a16_export)
    plugin = plan_build(source, tmp_path / "engines", BuildOptions(parse_profiles("1,2-8"), parse_policy("declared"),
                                                                  lowering="plugin", plugins=library),
                        ("tensorrt", "10.9"))
    assert plugin.lowering == "plugin" and plugin.promised is True
    assert plugin.row_invariance["scope"] == "whole graph" and plugin.row_invariance["left_to_tensorrt"] == []
    qdq = plan_build(source, tmp_path / "rtx", BuildOptions(parse_profiles("1,2-8"), parse_policy("declared")),
                     ("tensorrt-rtx", "1.7.1.116"))
    assert qdq.lowering == "qdq" and qdq.promised is False and qdq.row_invariance["scope"] == "none"


def test_describe_left_names_a_few_weights_then_counts_the_rest():
    left = [{"kind": "float projection", "op_type": "MatMul", "weight": f"w{i}"} for i in range(5)]
    text = describe_left({"left_by_kind": {"float projection": 5}, "left_to_tensorrt": left})
    assert text == "5 float projection (MatMul w0, w1, w2 and 2 more)"
