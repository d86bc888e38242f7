"""The main job and a plain `export` with the same options write the same export bytes (README: exporting
twice gives identical bytes), also where the main job changes an option that the model does not use:
it asks for dense MoE experts when TensorRT-RTX builds, which a model without experts never sees."""

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.engines import backends
from support.export_hashes import file_hashes


@pytest.mark.skipif(backends.available()["tensorrt-rtx"] is None, reason="the TensorRT-RTX wheels do not import")
def test_main_job_and_export_write_the_same_bytes(demo_checkpoint, tmp_path):
    options = ["--weight-quantization", "w8a8"]
    job, plain = tmp_path / "job", tmp_path / "plain"
    r = CliRunner().invoke(cli, [str(demo_checkpoint), "-o", str(job), *options, "--backend", "tensorrt-rtx",
                                 "--profiles", "1", "--quiet"], catch_exceptions=False)
    assert r.exit_code == 0, r.output[-2000:]
    r = CliRunner().invoke(cli, ["export", str(demo_checkpoint), "-o", str(plain), *options, "--quiet"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output[-2000:]
    assert file_hashes(job) == file_hashes(plain)
