"""stdout holds results, stderr everything else: ``--json`` output parses as it comes out of a real
process (third-party libraries print their warnings on stdout), and the progress bar is gone before
the line that ends its step.

The CLI runs in its own interpreter (warnings that a library prints once per process would be
hidden by an earlier test in the same one).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import save_file

from metrale_export.exporter.demo import DEMO_CONFIG, demo_tensors


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory) -> Path:
    """The demo model with one layer and a small vocabulary (bf16 W4A16 scales: the initializers
    onnx-graphsurgeon warns about on stdout)."""
    d = tmp_path_factory.mktemp("small")
    cfg = dict(DEMO_CONFIG, vocab_size=192, num_hidden_layers=1)
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(demo_tensors(cfg), str(d / "model.safetensors"))
    return d


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metrale_export.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=600,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.fixture(scope="module")
def plain_run(small_checkpoint, tmp_path_factory) -> subprocess.CompletedProcess:
    r = cli(small_checkpoint, "-o", tmp_path_factory.mktemp("plain") / "o", "--skip-compare", "--skip-engines")
    assert r.returncode == 0, r.stderr
    return r


def test_main_job_json_stdout_is_only_the_json(small_checkpoint, tmp_path):
    r = cli(small_checkpoint, "-o", tmp_path / "o", "--json", "--skip-compare", "--skip-engines")
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)  # nothing else on stdout
    assert printed["steps"]["export"]["op_counts"] and printed["output"] == str(tmp_path / "o")


def test_library_warnings_are_not_shown(plain_run):
    """onnx-graphsurgeon's 'Could not convert: BFLOAT16' (and its hint to install 'colored') say
    nothing to a user: the bf16 scales are meant to stay ONNX tensors."""
    assert "[W]" not in plain_run.stdout + plain_run.stderr, plain_run.stdout + plain_run.stderr


def test_progress_bar_is_gone_before_the_step_line(plain_run):
    err = plain_run.stderr
    assert "writing weights" in err  # the bar was shown
    assert any(p.startswith("[1/3] exported") for p in re.split(r"[\r\n]", err)), err  # on its own line
    assert "writing weights" not in err.split("[1/3] exported", 1)[1], err  # and never redrawn
