"""Issue 19's acceptance on held-out models: the plugin lowering of Qwen3 dense, Qwen3-MoE and
Qwen3-Next exports made with transformers from random weights (not the built-in demos) leaves no
row-sensitive op to TensorRT, and ``inspect`` says the whole graph is promised. Each family is
exported in one weight format, the three formats between them."""

import json

import onnx
import pytest
from click.testing import CliRunner

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.engines import lowering
from metrale_export.invariance import ROW_SENSITIVE, audit, describe_left
from support.held_out import write_qwen3, write_qwen3_moe, write_qwen3_next

pytest.importorskip("transformers")

CASES = {"dense": (write_qwen3, "w4a4"), "moe": (write_qwen3_moe, "w8a8"), "next": (write_qwen3_next, "w4a16")}


@pytest.fixture(scope="module", params=sorted(CASES))
def held_out_export(request, tmp_path_factory):
    write, fmt = CASES[request.param]
    root = tmp_path_factory.mktemp(f"held_out_{request.param}")
    ckpt = write(root / "hf", layers=4)
    out = root / "export"
    r = CliRunner().invoke(cli, ["export", str(ckpt), "-o", str(out), "--weight-quantization", fmt])
    assert r.exit_code == 0, r.output
    return request.param, out


def test_plugin_lowering_leaves_nothing_row_sensitive(held_out_export):
    family, out = held_out_export
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    formats = {op.key: op.activation_format for op in lowering.metrale_ops(model)}
    lowered = lowering.lower_plugins(model, formats)
    a = audit(lowered.graph)
    assert a["left_to_tensorrt"] == [], f"{family}: {describe_left(a)}"
    standard = {n.op_type for n in lowered.graph.node if n.domain in ("", "ai.onnx")}
    assert not standard & ROW_SENSITIVE and not [t for t in standard if t.startswith("Reduce")], (family, standard)
    kept = {n.op_type for n in lowered.graph.node if n.domain == contract.DOMAIN}
    assert {"Attention", "RMSNorm", "FloatProj"} <= kept
    if family != "dense":
        assert "Router" in kept
    if family == "next":
        assert {"CausalConv1d", "GatedDeltaRule"} <= kept


def test_inspect_promises_the_whole_graph(held_out_export):
    family, out = held_out_export
    r = CliRunner().invoke(cli, ["inspect", str(out), "--json"])
    assert r.exit_code == 0, r.output
    ri = json.loads(r.stdout)["row_invariance"]
    assert ri["left_to_tensorrt"] == [] and ri["promised"] is True and ri["scope"] == "whole graph", family
    text = CliRunner().invoke(cli, ["inspect", str(out), "--no-ops"]).output
    assert "promised: true (scope whole graph)" in text


def test_a_row_sensitive_op_left_breaks_the_promise(held_out_export, monkeypatch):
    """The audit can fail: one metrale RMSNorm expanded to standard ONNX (as the lowering does for an
    op without a plugin) is found, and the promise falls to the projections."""
    import dataclasses

    family, out = held_out_export
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    formats = {op.key: op.activation_format for op in lowering.metrale_ops(model)}
    monkeypatch.setitem(contract.OPS, "RMSNorm", dataclasses.replace(contract.OPS["RMSNorm"], has_plugin=False))
    lowered = lowering.lower_plugins(model, formats)
    a = audit(lowered.graph)
    assert a["left_by_kind"].get("norm", 0) > 0, family
