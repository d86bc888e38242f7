"""Held-out depth: Qwen3 checkpoints of 28 and 36 layers, made with transformers from random weights
with outlier channels (tests/support/held_out.py), pass the main job in every weight format, the
comparison included, and build engines with TensorRT-RTX (one profile, small context, to keep the
engine builds short). Slow: each case exports, compares and builds a real-depth model."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.engines import backends

from support.held_out import write_qwen3

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


def _word_tokenizer(root, vocab: int) -> None:
    """A word-level tokenizer.json in the checkpoint (the held-out checkpoints ship none)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(1, vocab)} | {"[UNK]": 0}
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))


@pytest.mark.parametrize("data", ("random:64", "text"))
def test_static_w8a8_scales_at_real_depth(checkpoints, data, tmp_path):
    """Issue 23: a 28-layer Qwen3 exports with calibrated static W8A8 scales, compare passes and
    states the logits error against dynamic scales, an engine builds, and a second export of the
    same data gives the same bytes."""
    from support.export_hashes import file_hashes

    ckpt = checkpoints[28]
    if data == "text":
        _word_tokenizer(ckpt, 512)
        text = tmp_path / "calib.txt"
        text.write_text(" ".join(f"w{(i * 37) % 511 + 1}" for i in range(300)))
        data = str(text)
    static = ["--weight-quantization", "w8a8", "--activation-scales", "static", "--calibration-data", data]
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, [str(ckpt), "-o", str(out), *static, "--backend", "tensorrt-rtx",
                                 "--profiles", "1", "--max-context", "128", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    compare = json.loads(r.output[r.output.index("{"):])["steps"]["compare"]
    assert compare["ok"] is True
    assert [c["case"] for c in compare["static_vs_dynamic"]] == ["prefill", "decode"]
    assert all(0 < c["rel_error"] < 1 for c in compare["static_vs_dynamic"])
    assert len(list(out.rglob("*.engine"))) == 1
    again = tmp_path / "again"
    r = CliRunner().invoke(cli, ["export", str(ckpt), "-o", str(again), *static, "--quiet"], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-3000:]
    first = {k: v for k, v in file_hashes(out).items()}
    assert file_hashes(again) == first
