"""The op contract module: the files it generates for the C++ side (plugins/contract.json and
plugins/include/metrale/contract.h) are current, a hand edit or a contract change makes them stale,
the plugin sources take the contract's values from the header, and an attribute added to one op
spec and nowhere else reaches (or stops) every consumer."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from metrale_export import contract
from metrale_export.contract import header as contract_header
from support.plugin_contract import drift

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"


def test_generated_files_are_current():
    assert contract.JSON_PATH == PLUGINS / "contract.json"
    assert contract_header.HEADER_PATH == PLUGINS / "include" / "metrale" / "contract.h"
    assert contract.stale() == []


def test_a_hand_edit_of_the_header_is_stale(tmp_path, monkeypatch):
    edited = tmp_path / "contract.h"
    text = contract_header.HEADER_PATH.read_text()
    assert '{"weight_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "channel"}' in text
    edited.write_text(text.replace('false, 0, 0.0f, "channel"}', 'false, 0, 0.0f, "block128"}'))
    monkeypatch.setattr(contract_header, "HEADER_PATH", edited)
    problems = contract.stale()
    assert len(problems) == 1 and str(edited) in problems[0] and "regenerate" in problems[0], problems
    out = subprocess.run([sys.executable, "-m", "metrale_export.contract", "--check"], capture_output=True,
                         text=True, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr  # the real files are untouched


def test_a_changed_default_changes_the_header(monkeypatch):
    before = contract_header.to_header()
    spec = contract.OPS["W8A8Proj"]
    attrs = tuple(dataclasses.replace(a, default="block128") if a.name == "weight_scale_granularity" else a
                  for a in spec.attributes)
    monkeypatch.setitem(contract.OPS, "W8A8Proj", dataclasses.replace(spec, attributes=attrs))
    after = contract_header.to_header()
    assert after != before
    w8a8 = after[after.index("struct W8A8Proj\n"):after.index("struct W4A4Proj\n")]
    assert '{"weight_scale_granularity", FieldType::kSTRING, false, 0, 0.0f, "block128"}' in w8a8
    assert contract.stale() != []


def test_an_added_op_appears_in_the_header(monkeypatch):
    """An op added to OPS (here without a plugin, with a float attribute) is generated with no
    per-op code in the generator; a dtype it cannot spell is an error naming the op."""
    op = contract.OpSpec(
        "MadeUpNorm", "madeup", 3, "float", inputs=(contract.Input("gamma", "bfloat16", ("k",)),),
        attributes=(contract.Attribute("k", "int"), contract.Attribute("epsilon", "float", default=1e-6)),
        activation_formats=("bf16",), default_activation="bf16", has_plugin=False)
    monkeypatch.setitem(contract.OPS, "MadeUpNorm", op)
    text = contract_header.to_header()
    assert "struct MadeUpNorm\n" in text
    assert '{"epsilon", FieldType::kFLOAT, false, 0, 1e-06f, nullptr}' in text
    assert '{"gamma", TensorType::kBFLOAT16, nullptr, nullptr, "[k]"}' in text
    assert "opInfo<MadeUpNorm>()" in text[text.index("constexpr OpInfo kOPS[]"):]
    assert 'METRALE_CONTRACT_OP("MadeUpNorm", 3, "3", "madeup", "x", false, nullptr, 0, nullptr, "bf16");' in text
    assert "kDOMAIN_VERSION{3}" in text
    assert drift(PLUGINS) == []  # no plugin expected
    bad = dataclasses.replace(op, inputs=(contract.Input("gamma", "complex64", ("k",)),))
    monkeypatch.setitem(contract.OPS, "MadeUpNorm", bad)
    with pytest.raises(ValueError, match="MadeUpNorm: input 'gamma' has dtype 'complex64'"):
        contract_header.to_header()


def test_plugin_sources_follow_the_contract():
    assert drift(PLUGINS) == []


def _plugin_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "plugins"
    shutil.copytree(PLUGINS, copy, ignore=shutil.ignore_patterns("*.cu", "*.cuh", "*.md", "*.txt", "Makefile"))
    return copy


def test_drift_check_reports_a_restated_value_and_a_missing_plugin(tmp_path, monkeypatch):
    copy = _plugin_copy(tmp_path)
    cpp = copy / "w8a8Proj" / "W8A8ProjPlugin.cpp"
    cpp.write_text(cpp.read_text().replace('reader.getString("weight_scale_granularity")',
                                           'reader.has("weight_scale_granularity") ? "block128" : "channel"'))
    library = copy / "common" / "pluginLibrary.cpp"
    library.write_text(library.read_text().replace("static RetiredPluginCreator<GroupedProjPlugin<W4A16Format>>",
                                                   "static ProjectionPluginCreator<GroupedProjPlugin<W4A16Format>>"))
    monkeypatch.setitem(contract.OPS, "GroupedProj", dataclasses.replace(contract.W8A8, op_type="GroupedProj"))
    problems = drift(copy)
    assert any('W8A8ProjPlugin.cpp: spells the contract value "block128"' in p for p in problems), problems
    assert any('W8A8ProjPlugin.cpp: spells the contract value "channel"' in p for p in problems), problems
    assert any("W4A16MoEProj lacks a RetiredPluginCreator<GroupedProjPlugin<W4A16Format>>" in p
               for p in problems), problems
    assert any("GroupedProj: no struct *Format" in p for p in problems), problems
    assert len(problems) == 4, problems


def test_drift_check_counts_one_retired_creator_per_retired_version(tmp_path):
    """W8A8Proj version 3 retires versions 1 and 2: a library with only the first refusing creator
    is reported (a version-2 graph would find no creator and fail without the re-export message)."""
    copy = _plugin_copy(tmp_path)
    library = copy / "common" / "pluginLibrary.cpp"
    text = library.read_text()
    assert "RetiredPluginCreator<DenseProjPlugin<W8A8Format>, 1>" in text
    library.write_text(text.replace("static RetiredPluginCreator<DenseProjPlugin<W8A8Format>, 1> sW8A8V2Creator;", ""))
    problems = drift(copy)
    assert problems == ["plugins/common/pluginLibrary.cpp: W8A8Proj lacks a RetiredPluginCreator<DenseProjPlugin<"
                        "W8A8Format>> (indices [0]), but the contract names 2 retired versions (indices [0, 1])"], problems


def test_contract_imports_neither_torch_nor_onnx():
    code = ("import sys, metrale_export.contract; "
            "print(sorted(m for m in ('torch', 'onnx', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_specs_are_consistent():
    for op_type, spec in contract.OPS.items():
        assert spec.op_type == op_type
        names = spec.attribute_names
        assert len(set(names)) == len(names), op_type
        assert {"family", "name"} <= set(names)
        for o in spec.outputs:
            if o.optional:  # an absent output is passed through from a named input
                assert spec.attribute(o.gate).values == (0, 1) and o.absent in (spec.x_name, "x", *spec.torch_inputs)
        if not spec.is_projection:
            assert spec.category in contract.NON_PROJECTION_CATEGORIES, op_type
            assert not spec.activation_formats and "activation_format" not in names
            continue
        assert spec.default_activation in spec.activation_formats
        assert set(spec.activation_formats) <= set(contract.ACTIVATION_FORMATS)
        assert spec.attribute("activation_format").values == spec.activation_formats
        for i in spec.inputs:
            if i.optional:  # a has_* flag, or an enumerated value (W8A8Proj's input_scale: tensor)
                values = spec.attribute(i.gate).values
                assert values == (0, 1) if i.gate_value == 1 else i.gate_value in values, (op_type, i.name)
        assert {"n", "k", "has_bias", "family", "name"} <= set(names)
    assert contract.domain_version() == max(s.version for s in contract.OPS.values())


def test_node_versions_of_value_only_changes():
    """W8A8MoEProj version 2 only added activation_scale_granularity=tensor: nodes without it are
    version 1 (no plugin_version), nodes with it version 2; older grouped graphs read as they are."""
    spec = contract.op("W8A8MoEProj")
    assert spec.version == 2
    assert spec.node_version({"activation_scale_granularity": "row"}) == 1
    assert spec.node_version({}) == 1  # the default, row
    assert spec.node_version({"activation_scale_granularity": b"tensor"}) == 2
    assert not contract.names_plugin_version(spec, {"activation_scale_granularity": "row_block128"})
    assert contract.names_plugin_version(spec, {"activation_scale_granularity": "tensor"})
    assert contract.version_check("W8A8MoEProj", 1).ok
    assert "input_scale" in spec.present_inputs({"activation_scale_granularity": "tensor"})
    assert "input_scale" not in spec.present_inputs({"activation_scale_granularity": "row"})
    assert contract.compatible_version(spec) == 1  # the plugins' second creator
    assert contract.op("W4A16Proj").node_version({}) == 2  # a layout change: every node
    assert not contract.version_check("W4A16Proj", 1).ok
    assert contract.compatible_version(contract.op("W4A16Proj")) is None


def test_w8a8proj_version_3_retires_versions_1_and_2():
    """W8A8Proj version 3 multiplies on the FP8 tensor core (bits of its own): every node is a
    version-3 node (plugin_version "3"), and graphs of version 1 or 2 are refused with one line that
    names the version, what changed and says to re-export; the grouped op keeps its version 2."""
    spec = contract.op("W8A8Proj")
    assert spec.version == 3 and contract.domain_version() == 3
    for attrs in ({}, {"activation_scale_granularity": "row"}, {"activation_scale_granularity": "tensor"},
                  {"weight_scale_granularity": "block128", "activation_scale_granularity": "row_block128"}):
        assert spec.node_version(attrs) == 3, attrs
        assert contract.names_plugin_version(spec, attrs), attrs
    assert contract.compatible_version(spec) is None  # no creator builds old nodes as they are
    for old in (1, 2):
        ok, reasons = contract.version_check("W8A8Proj", old)
        assert not ok and len(reasons) == 1 and "\n" not in reasons[0], old
        why = reasons[0]
        assert f"version {old}" in why and "exact f16 products" in why and "re-export" in why, why
    assert contract.version_check("W8A8Proj", 3).ok
    assert contract.version_check("W8A8MoEProj", 2).ok and contract.op("W8A8MoEProj").version == 2
    assert "FP8 tensor core" in contract.W8A8_FP8_ARITHMETIC and contract.W8A8_FP8_ARITHMETIC in spec.doc


def test_the_header_states_the_enumerated_gate_and_the_retired_versions():
    """W8A8Proj's input_scale is gated by a value of activation_scale_granularity, not a has_* flag;
    the header says so (gateValue), names versions 1 and 2 as retired (a refusing creator each) and
    W8A8MoEProj's version 1 as the compatible one (a second creator)."""
    header = contract_header.to_header()
    w8a8 = header[header.index("struct W8A8Proj\n"):header.index("struct W4A4Proj\n")]
    assert '{"input_scale", TensorType::kFLOAT32, "activation_scale_granularity", "tensor", "[1]"}' in w8a8
    # type, version number and string, kind, x's name, plugin, grouped-of, nb retired, compatible, default
    assert 'METRALE_CONTRACT_OP("W8A8Proj", 3, "3", "w8a8", "x", true, nullptr, 2, nullptr, "fp8");' in w8a8
    assert 'kRETIRED[]{{"1", "exact f16 products' in w8a8 and '{"2", "exact f16 products' in w8a8
    moe = header[header.index("struct W8A8MoEProj\n"):]
    moe = moe[:moe.index("\n};")]
    assert 'METRALE_CONTRACT_OP("W8A8MoEProj", 2, "2", "w8a8", "x", true, "W8A8Proj", 0, "1", "fp8");' in moe
    w4a4 = header[header.index("struct W4A4Proj\n"):]
    assert '{"input_scale", TensorType::kFLOAT32, "has_input_scale", nullptr, "[1]"}' in w4a4
    assert 'METRALE_CONTRACT_OP("W4A4Proj", 1, "1", "w4a4", "x", true, nullptr, 0, nullptr, "nvfp4");' in w4a4
    assert "kRETIRED[]{{nullptr, nullptr}}" in w4a4[:w4a4.index("\n};")]
    assert "kMETRALE_ASCALE_TENSOR = 2" in header


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
    # the generated files for the C++ side are stale, and the header gives the plugins the field
    # (whose visitFields, lacking it, FieldListCheck refuses when a plugin is created)
    assert {p.split(":")[0] for p in contract.stale()} == {str(contract.JSON_PATH), str(contract_header.HEADER_PATH)}
    w4a16 = contract_header.to_header().split("struct W4A16Proj\n")[1].split("\n};")[0]
    assert '{"made_up", FieldType::kINT, true, 0, 0.0f, nullptr}' in w4a16
    assert "static constexpr int32_t kMADE_UP_VALUES[]{0, 1, 2};" in contract_header.to_header()


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


def test_a_non_projection_op_has_its_own_outputs_and_float_attributes():
    norm = contract.op("RMSNorm")
    assert norm.present_outputs({}) == ("y",)
    assert norm.present_outputs({"has_residual": 1}) == ("y", "residual_out")
    assert norm.float_attributes == ("epsilon",)
    assert norm.emitted_attributes[-2:] == ("family", "name")  # ints, floats, strings
    assert contract.op("Router").present_outputs({}) == ("topk_ids", "topk_weights")
    # The projections keep their one output and are the only ones the engine policy sees.
    assert all(s.outputs == (contract.Output("y", "x", ("m", "n")),) for s in contract.projections().values())
    assert set(contract.projections()) == {t for t, s in contract.OPS.items() if "Proj" in t and t != "FloatProj"}
    assert "float" not in contract.by_kind()


def test_a_graph_with_two_outdated_op_types_names_both():
    """check_model names every outdated op type at once (each once however many nodes it has)."""
    import onnx

    from metrale_export.errors import InputError

    nodes = [onnx.helper.make_node(t, [], [f"y{i}"], domain=contract.DOMAIN, name=f"n{i}")
             for i, t in enumerate(("W4A16Proj", "W8A8Proj", "W4A16Proj"))]
    model = onnx.helper.make_model(onnx.helper.make_graph(nodes, "g", [], []),
                                   opset_imports=[onnx.helper.make_opsetid(contract.DOMAIN, 1)])
    with pytest.raises(InputError) as e:
        contract.check_model(model, "model.onnx")
    message = str(e.value)
    assert message.startswith("model.onnx: W4A16Proj of metrale op contract version 1") and "\n" not in message
    assert message.count("W8A8Proj of metrale op contract version 1") == 1 and message.count("W4A16Proj of") == 1
