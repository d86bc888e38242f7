"""``metrale-export build`` through Click's CliRunner: exit codes, files written, reruns skip."""

import json

import onnx
import pytest
from click.testing import CliRunner

from metrale_export.engines import backends
from support.graphs import Proj, projection_graph

try:
    from metrale_export.cli.main import cli
except ModuleNotFoundError as e:  # the group imports every command module
    cli, _cli_missing = None, str(e)
else:
    _cli_missing = ""

needs_cli = pytest.mark.skipif(cli is None, reason=f"the CLI group does not import yet: {_cli_missing}")
needs_rtx = pytest.mark.skipif(
    backends.available()["tensorrt-rtx"] is None,
    reason=f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}",
)


@pytest.fixture
def graph(tmp_path):
    chain = projection_graph(64, [Proj("W4A16Proj", 32, family="attn"), Proj("W8A8Proj", 32)], seed=2)
    path = tmp_path / "chain.onnx"
    onnx.save(chain.model, path)
    return path


def _run(*args):
    return CliRunner().invoke(cli, ["build", *map(str, args)])


@needs_cli
@needs_rtx
def test_builds_writes_and_skips(graph, tmp_path):
    out = tmp_path / "engines"
    args = [graph, "-o", out, "--backend", "tensorrt-rtx", "--lowering", "qdq", "--profiles", "1,2-8"]
    first = _run(*args)
    assert first.exit_code == 0, first.output
    assert "building rows 2-8" in first.output and "row invariance not promised" in first.output
    assert sorted(p.name for p in out.glob("*.engine")) == ["rows-1.engine", "rows-2-8.engine"]
    written = (out / "manifest.json").read_bytes()
    manifest = json.loads(written)
    assert [e["label"] for e in manifest["engines"]] == ["1", "2-8"]

    again = _run(*args, "--json")
    assert again.exit_code == 0, again.output
    assert "unchanged rows 1" in again.output and "building" not in again.output
    assert "expected build time" not in again.output  # nothing to build, nothing to expect
    start = again.output.index("{")
    printed = json.JSONDecoder().raw_decode(again.output[start:])[0]
    assert printed == manifest
    # Every engine reused: each keeps its build time and its estimate, so the manifest is unchanged.
    assert (out / "manifest.json").read_bytes() == written

    quiet = _run(*args, "--quiet")
    assert quiet.exit_code == 0 and quiet.output == ""


@needs_cli
@needs_rtx
def test_build_states_each_engines_expected_time_up_front_and_as_it_goes(graph, tmp_path):
    """Issue 24.9: before the first engine one line gives each engine's expected time and the total
    (engines/resources.py, from the lowered graph); after each, its time against its estimate and
    what remains. The manifest (and --json) keeps both per engine, and their sums."""
    from metrale_export.engines import resources

    out = tmp_path / "engines"
    r = _run(graph, "-o", out, "--backend", "tensorrt-rtx", "--lowering", "qdq", "--profiles", "1,2-8", "--json")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    (up_front,) = [i for i, line in enumerate(lines) if line.startswith("expected build time: ")]
    assert up_front < min(i for i, line in enumerate(lines) if line.startswith("building rows"))
    printed = json.JSONDecoder().raw_decode(r.output[r.output.index("{"):])[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert printed == manifest
    (lowered,) = [p for p in (out / "onnx").glob("*.onnx") if not p.name.endswith(".shared.onnx")]
    nodes = len(onnx.load(str(lowered), load_external_data=False).graph.node)
    expected = []
    for e in manifest["engines"]:  # a graph without input_ids: one "rows" profile each
        assert e["lowered_nodes"] == nodes
        estimate = resources.estimate_engine_seconds("tensorrt-rtx", nodes, len(e["optimization_profiles"]))
        assert e["expected_build_seconds"] == round(estimate, 1) > 0
        expected.append(estimate)
    assert lines[up_front].startswith(
        f"expected build time: {resources.describe_seconds(sum(expected))} for 2 engine(s) "
        f"(rows 1 {resources.describe_seconds(expected[0])}, 2-8 {resources.describe_seconds(expected[1])})")
    first, second = (e for e in manifest["engines"])
    built = [line for line in lines if line.startswith("  built ")]
    assert len(built) == 2
    assert f"expected {resources.describe_seconds(expected[0])}); 1 engine(s) left, about " in built[0]
    assert built[1].endswith(f"expected {resources.describe_seconds(expected[1])})")
    assert manifest["build_time"] == {
        "seconds": round(first["build_seconds"] + second["build_seconds"], 3),
        "expected_seconds": round(first["expected_build_seconds"] + second["expected_build_seconds"], 1),
        "estimated": 2}


@needs_cli
@pytest.mark.parametrize(
    "extra, words",
    [
        (["--profiles", "8-2"], "ends before it starts"),
        (["--profiles", "1,1-4"], "overlaps"),
        (["--activation-quantization", "int8"], "expected adaptive"),
        (["--activation-quantization", "mlp=fp8"], "unknown family"),
        (["--rtx-target", "89"], "MAJOR.MINOR"),
        (["--backend", "tensorrt-rtx", "--lowering", "plugin"], "TensorRT-RTX"),
        (["--lowering", "plugin", "--backend", "tensorrt-rtx"], "--lowering"),
    ],
)
def test_usage_errors_exit_2(graph, tmp_path, extra, words):
    result = _run(graph, "-o", tmp_path / "out", *extra)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert not (tmp_path / "out").exists()


@needs_cli
@needs_rtx
def test_plugins_with_qdq_is_a_usage_error(graph, tmp_path):
    lib = tmp_path / "libmetrale_plugins.so"
    lib.write_bytes(b"\x7fELF")
    result = _run(graph, "-o", tmp_path / "out", "--backend", "tensorrt-rtx", "--lowering", "qdq",
                  "--plugins", lib)
    assert result.exit_code == 2 and "--plugins is only used by --lowering plugin" in result.output


@needs_cli
@needs_rtx
def test_policy_refusal_exits_2_naming_the_op(graph, tmp_path):
    result = _run(graph, "-o", tmp_path / "out", "--backend", "tensorrt-rtx",
                  "--activation-quantization", "fp8")
    assert result.exit_code == 2, result.output
    assert "layers.0.attn.w4a16proj" in result.output and "not in the op contract's table" in result.output


@needs_cli
def test_missing_input_exits_2(tmp_path):
    assert _run(tmp_path / "nope.onnx").exit_code == 2
    (tmp_path / "export").mkdir()
    result = _run(tmp_path / "export", "--backend", "tensorrt-rtx")
    assert result.exit_code == 2 and "model.onnx" in result.output


@needs_cli
def test_missing_backend_names_the_install(graph, tmp_path):
    if backends.available()["tensorrt"] is not None:
        pytest.skip("real TensorRT is installed here: nothing is missing")
    result = _run(graph, "-o", tmp_path / "out", "--backend", "tensorrt")
    assert result.exit_code == 1
    assert "pip install tensorrt" in result.output


@needs_cli
def test_output_holding_another_manifest_is_refused_untouched(demo_exports, tmp_path):
    """`build OUT -o OUT` would replace the export's manifest.json with the engines' one."""
    import shutil

    export = tmp_path / "export"
    shutil.copytree(demo_exports["w8a8"], export)
    before = (export / "manifest.json").read_bytes()
    result = _run(export, "-o", export, "--backend", "tensorrt-rtx", "--profiles", "1")
    assert result.exit_code == 2, result.output
    assert "manifest.json is an export's" in result.output and "choose another -o" in result.output
    assert (export / "manifest.json").read_bytes() == before
    assert sorted(p.name for p in export.iterdir()) == ["manifest.json", "model.onnx"]


@needs_cli
@needs_rtx
def test_inspect_shows_the_engines_of_an_output_and_of_an_engine_directory(demo_exports, tmp_path):
    import shutil

    export = tmp_path / "export"
    shutil.copytree(demo_exports["w8a8"], export)
    built = _run(export, "--backend", "tensorrt-rtx", "--profiles", "1", "--max-context", "64", "-q")
    assert built.exit_code == 0, built.output
    inspect = CliRunner().invoke(cli, ["inspect", str(export), "--no-ops"])
    assert inspect.exit_code == 0, inspect.output
    assert f"engines: {export / 'engines'}, 1 engine(s) (complete), tensorrt-rtx" in inspect.output
    assert "rows 1: rows-1.engine" in inspect.output and "row invariance not promised" in inspect.output

    manifest = json.loads((export / "engines" / "manifest.json").read_text())
    manifest["complete"] = False  # what an interrupted build leaves
    (export / "engines" / "manifest.json").write_text(json.dumps(manifest))
    (export / "engines" / "rows-1.engine").unlink()
    alone = CliRunner().invoke(cli, ["inspect", str(export / "engines"), "--json"])
    assert alone.exit_code == 0, alone.output
    summary = json.loads(alone.output)
    assert summary["complete"] is False and summary["engines"][0]["present"] is False
    text = CliRunner().invoke(cli, ["inspect", str(export / "engines")]).output
    assert "INCOMPLETE" in text and "MISSING" in text
