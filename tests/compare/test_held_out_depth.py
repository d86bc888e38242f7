"""Held-out depth: Qwen3 checkpoints of 28 and 36 layers, made with transformers from random weights
with outlier channels (tests/compare/checkpoints.py), pass the main job in every weight format, the
comparison included, and build engines with TensorRT-RTX (one profile, small context, to keep the
engine builds short). Slow: each case exports, compares and builds a real-depth model."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.engines import backends

from checkpoints import write_qwen3

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(backends.available().get("tensorrt-rtx") is None,
                       reason=f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}"),
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    base = tmp_path_factory.mktemp("held_out")
    return {n: write_qwen3(base / f"qwen3-{n}", n) for n in (28, 36)}


@pytest.mark.parametrize("fmt", ("w4a16", "w8a8", "w4a4"))
@pytest.mark.parametrize("layers", (28, 36))
def test_main_job_at_real_depth(checkpoints, layers, fmt, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, [str(checkpoints[layers]), "-o", str(out), "--weight-quantization", fmt,
                                 "--backend", "tensorrt-rtx", "--profiles", "1", "--max-context", "128",
                                 "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    summary = json.loads(r.output[r.output.index("{"):])
    assert summary["steps"]["compare"]["ok"] is True
    assert summary["steps"]["engines"]["count"] == 1
    assert len(list(out.rglob("*.engine"))) == 1
