"""The op contract module: its JSON for the C++ side is current, the plugin sources agree with it,
and an attribute added to one op spec and nowhere else reaches (or stops) every consumer."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from metrale_export import contract
from support.plugin_contract import drift

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"


def test_contract_json_is_current():
    assert contract.JSON_PATH == PLUGINS / "contract.json"
    assert contract.JSON_PATH.read_text() == contract.to_json(), (
        "plugins/contract.json is stale: regenerate it with python -m metrale_export.contract --write")


def test_plugin_sources_agree_with_the_contract_json():
    assert drift(json.loads(contract.JSON_PATH.read_text()), PLUGINS) == []


def test_contract_imports_neither_torch_nor_onnx():
    code = ("import sys, metrale_export.contract; "
            "print(sorted(m for m in ('torch', 'onnx', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_specs_are_consistent():
    for op_type, spec in contract.OPS.items():
        assert spec.op_type == op_type
        assert spec.default_activation in spec.activation_formats
        assert set(spec.activation_formats) <= set(contract.ACTIVATION_FORMATS)
        assert spec.attribute("activation_format").values == spec.activation_formats
        names = spec.attribute_names
        assert len(set(names)) == len(names), op_type
        for i in spec.inputs:
            if i.optional:
                assert spec.attribute(i.gate).values == (0, 1), (op_type, i.name)
        assert {"n", "k", "has_bias", "family", "name"} <= set(names)
    assert contract.domain_version() == max(s.version for s in contract.OPS.values())


def test_drift_check_reports_a_changed_default_and_a_missing_plugin(tmp_path):
    c = contract.to_dict()
    for a in c["ops"]["W8A8Proj"]["attributes"]:
        if a["name"] == "weight_scale_granularity":
            a["default"] = "block128"
    c["ops"]["W4A4Proj"]["version"] = 2
    c["ops"]["GroupedProj"] = dict(c["ops"]["W8A8Proj"], op_type="GroupedProj")
    problems = drift(c, PLUGINS)
    assert any("'weight_scale_granularity' defaults to 'channel'" in p for p in problems), problems
    assert any("W4A4ProjPlugin.cpp: plugin version '1'" in p for p in problems), problems
    assert any("no plugins/*/GroupedProjPlugin.cpp" in p for p in problems), problems


@pytest.fixture
def made_up_attribute(monkeypatch):
    """W4A16Proj with one more attribute, ``made_up`` (int 0..2, required), in the contract only."""
    spec = contract.OPS["W4A16Proj"]
    extra = contract.Attribute("made_up", "int", (0, 1, 2), doc="a test attribute")
    patched = dataclasses.replace(spec, attributes=spec.attributes + (extra,))
    monkeypatch.setitem(contract.OPS, "W4A16Proj", patched)
    return patched


def test_a_made_up_attribute_reaches_every_consumer(made_up_attribute, demo_exports):
    from metrale_export.engines import lowering
    from metrale_export.exporter.projection import ProjSpec, Projection
    from metrale_export.ops import onnx_translation, ort, torch_ops

    # the ONNX schema and the node attribute list
    schema = onnx_translation.schema("W4A16Proj")
    assert schema.attributes["made_up"].type == onnx.defs.OpSchema.AttrType.INT
    assert onnx_translation.attribute_names("W4A16Proj")[-4:] == ("made_up", "activation_format", "family", "name")
    # the ONNX Runtime op's declared attributes and the torch op's schema
    assert "made_up" in ort.attribute_types("W4A16Proj")
    assert torch_ops.schema(made_up_attribute).endswith("SymInt made_up) -> Tensor")
    # the lowering refuses an export made before the attribute existed
    model = onnx.load(str(demo_exports["w4a16"] / "model.onnx"))
    with pytest.raises(lowering.LoweringError, match="attribute 'made_up' is missing"):
        lowering.metrale_ops(model)
    with pytest.raises(lowering.LoweringError, match="attribute 'made_up' is missing"):
        lowering.lower_qdq(model)
    # a projection spec without it fails where the op is called, naming it
    spec = ProjSpec("p", "w4a16", 8, 32, "ffn", attrs={"group_size": 32, "activation_format": "bf16"})
    with pytest.raises(ValueError, match="needs attribute 'made_up'"):
        Projection(spec)._attr(made_up_attribute, "made_up")
    # the JSON for the C++ side is stale, and the plugin sources lack the field
    assert contract.to_json() != contract.JSON_PATH.read_text()
    problems = drift(contract.to_dict(), PLUGINS)
    for what in ("fieldNames()", "FieldReader", "writeFields()"):
        assert any(what in p and "made_up" in p for p in problems), (what, problems)


def test_a_made_up_attribute_value_is_refused_by_the_lowering(made_up_attribute, demo_exports):
    from metrale_export.engines import lowering

    model = onnx.load(str(demo_exports["w4a16"] / "model.onnx"))
    for node in model.graph.node:
        if node.op_type == "W4A16Proj":
            node.attribute.append(onnx.helper.make_attribute("made_up", 7))
    with pytest.raises(lowering.LoweringError, match=r"made_up=7: expected one of 0, 1, 2"):
        lowering.metrale_ops(model)


def test_lowering_refuses_an_attribute_the_contract_does_not_define(demo_exports):
    from metrale_export.engines import lowering

    model = onnx.load(str(demo_exports["w8a8"] / "model.onnx"))
    node = next(n for n in model.graph.node if n.op_type == "W8A8Proj")
    node.attribute.append(onnx.helper.make_attribute("group_size", 32))
    with pytest.raises(lowering.LoweringError, match="group_size are not in the op contract"):
        lowering.metrale_ops(model)
