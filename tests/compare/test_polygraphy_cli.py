"""Polygraphy's own CLI runs an export with the metrale reference ops (the ``polygraphy.run.plugins``
extension of pyproject.toml) and compares it with the lowered qdq graph, through the real
``polygraphy`` console script."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import onnx
import pytest

from metrale_export.engines.build import LoweredGraphFromOnnx
from metrale_export.engines.plan import BuildOptions

POLYGRAPHY = Path(sys.executable).parent / "polygraphy"
STEP = ["--metrale-step", "2,7,0"]
COSINE = ["--compare-func", "cosine_similarity", "--cosine-similarity-threshold", "0.9999"]


_BUILD_DEFAULTS = {f.name: f.default for f in dataclasses.fields(BuildOptions)}


def _lowered_as_built(export_dir: Path, path: Path) -> None:
    """The qdq graph ``metrale-export build`` writes (the build's own loader, its default float
    weights: bfloat16 lm_head Gemm, which ONNX Runtime's CPU provider has no kernel for), and, as
    its default shared engine weights make it write (what ``make demo`` leaves), the shared-weights
    header ``qdq-*.shared.onnx`` beside it."""
    LoweredGraphFromOnnx(export_dir / "model.onnx", "qdq", None, _BUILD_DEFAULTS["float_weights"], path,
                         shared=_BUILD_DEFAULTS["engine_weights"] == "shared")()


def _polygraphy(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(POLYGRAPHY), "run", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def with_qdq(demo_exports, tmp_path_factory):
    """The W4A16 demo export with its lowered qdq graph as and where `build --lowering qdq` writes it."""
    names = [e.name for e in metadata.entry_points(group="polygraphy.run.plugins")]
    assert "metrale" in names, ("the polygraphy.run.plugins entry point of pyproject.toml is not installed: "
                                "reinstall the package (make setup)")
    out = tmp_path_factory.mktemp("pg") / "w4a16"
    shutil.copytree(demo_exports["w4a16"], out)
    _lowered_as_built(out, out / "engines" / "onnx" / "qdq-test.onnx")
    wrong = out.parent / "w8a8-qdq.onnx"
    _lowered_as_built(demo_exports["w8a8"], wrong)
    return out, wrong


def test_polygraphy_run_compares_the_metrale_graph_with_its_qdq_lowering(with_qdq):
    out, _ = with_qdq
    r = _polygraphy(out / "model.onnx", "--metrale-onnxrt", "--metrale-qdq", *STEP, *COSINE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    text = r.stdout + r.stderr
    assert "metrale-onnxrt" in text and "metrale-qdq" in text and "PASSED" in text
    # Every layer's state got its shape from the manifest: present_key.1 of a 7-token prefill.
    assert "present_key.1 [dtype=float32, shape=(2, 2, 7, 64)]" in text


def test_polygraphy_run_without_a_lowered_graph_says_so_in_one_line(demo_exports):
    r = _polygraphy(demo_exports["w4a16"] / "model.onnx", "--metrale-onnxrt", "--metrale-qdq", *STEP, *COSINE)
    text = r.stdout + r.stderr
    assert r.returncode != 0 and "Traceback" not in text, text[-3000:]
    assert "--metrale-qdq: expected one engines/onnx/qdq-*.onnx" in text and "found 0" in text, text[-3000:]


def test_polygraphy_run_fails_against_another_format(with_qdq):
    out, wrong = with_qdq
    r = _polygraphy(out / "model.onnx", "--metrale-onnxrt", "--metrale-qdq", "--metrale-qdq-model", wrong,
                    *STEP, *COSINE)
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr
