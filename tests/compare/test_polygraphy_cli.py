"""Polygraphy's own CLI runs an export with the metrale reference ops (the ``polygraphy.run.plugins``
extension of pyproject.toml) and compares it with the lowered qdq graph, through the real
``polygraphy`` console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import onnx
import pytest

from metrale_export.engines.lowering import lower_qdq, save_model

POLYGRAPHY = Path(sys.executable).parent / "polygraphy"
STEP = ["--metrale-step", "2,7,0"]
COSINE = ["--compare-func", "cosine_similarity", "--cosine-similarity-threshold", "0.9999"]


def _polygraphy(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(POLYGRAPHY), "run", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def with_qdq(demo_exports, tmp_path_factory):
    """The W4A16 demo export with its lowered qdq graph where `build --lowering qdq` writes it."""
    names = [e.name for e in metadata.entry_points(group="polygraphy.run.plugins")]
    assert "metrale" in names, ("the polygraphy.run.plugins entry point of pyproject.toml is not installed: "
                                "reinstall the package (make setup)")
    out = tmp_path_factory.mktemp("pg") / "w4a16"
    shutil.copytree(demo_exports["w4a16"], out)
    (out / "engines" / "onnx").mkdir(parents=True)
    save_model(lower_qdq(onnx.load(str(out / "model.onnx"))), out / "engines" / "onnx" / "qdq-test.onnx")
    wrong = out.parent / "w8a8-qdq.onnx"
    save_model(lower_qdq(onnx.load(str(demo_exports["w8a8"] / "model.onnx"))), wrong)
    return out, wrong


def test_polygraphy_run_compares_the_metrale_graph_with_its_qdq_lowering(with_qdq):
    out, _ = with_qdq
    r = _polygraphy(out / "model.onnx", "--metrale-onnxrt", "--metrale-qdq", *STEP, *COSINE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    text = r.stdout + r.stderr
    assert "metrale-onnxrt" in text and "metrale-qdq" in text and "PASSED" in text
    # Every layer's state got its shape from the manifest: present_key.1 of a 7-token prefill.
    assert "present_key.1 [dtype=float32, shape=(2, 2, 7, 64)]" in text


def test_polygraphy_run_fails_against_another_format(with_qdq):
    out, wrong = with_qdq
    r = _polygraphy(out / "model.onnx", "--metrale-onnxrt", "--metrale-qdq", "--metrale-qdq-model", wrong,
                    *STEP, *COSINE)
    assert r.returncode != 0 and "FAILED" in r.stdout + r.stderr
