"""The main job (``metrale-export MODEL``) on the demo checkpoint, export and comparison (engines
skipped), counting what it reads of the checkpoint: the real reader runs, only wrapped to count.

Issue 21's acceptance: the job opens the checkpoint once (one ``Checkpoint``, whose session the
export and the comparison share) and reads each safetensors header once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.exporter import checkpoint as checkpoint_module
from metrale_export.exporter import safetensors_files


@pytest.fixture
def counted(monkeypatch):
    """Every ``Checkpoint.open`` path and every safetensors header read (file name), in order."""
    opens, headers = [], []
    real_open = checkpoint_module.Checkpoint.open.__func__
    real_header = safetensors_files.read_header

    def counting_open(cls, path, headers=None):
        opens.append(Path(path))
        return real_open(cls, path, headers)

    def counting_header(path):
        headers.append(Path(path).name)
        return real_header(path)

    monkeypatch.setattr(checkpoint_module.Checkpoint, "open", classmethod(counting_open))
    # The module's own name and checkpoint.py's imported one: every caller goes through one of them.
    monkeypatch.setattr(safetensors_files, "read_header", counting_header)
    monkeypatch.setattr(checkpoint_module, "read_header", counting_header)
    return opens, headers


@pytest.fixture
def main_job(demo_checkpoint, tmp_path, counted):
    out = tmp_path / "o"
    result = CliRunner().invoke(cli, [str(demo_checkpoint), "-o", str(out), "--skip-engines", "--layers", "0",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    steps = json.loads(result.output)["steps"]
    assert steps["compare"]["ok"] and steps["engines"] == "skipped: --skip-engines"  # both steps ran
    return counted


def test_main_job_opens_the_checkpoint_once(main_job):
    opens, _ = main_job
    assert len(opens) == 1, opens


def test_main_job_reads_each_header_once(main_job, demo_checkpoint):
    _, headers = main_job
    per_file = Counter(headers)
    assert per_file and set(per_file.values()) == {1}, per_file
