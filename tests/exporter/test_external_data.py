"""A damaged external-data file (``model.onnx.data`` cut short) is refused as bad input, in one
line naming the file, by compare, build and inspect (exporter/external_data.py), before any weight
is read: the real CLI on a real export of the demo model with its weights kept external."""

from __future__ import annotations

import shutil

import onnx
import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.errors import InputError
from metrale_export.exporter import writer
from metrale_export.exporter import export as export_mod
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.external_data import external_data_files
from metrale_export.exporter.quantization import QuantRequest


@pytest.fixture(scope="module")
def external_export(demo_checkpoint, tmp_path_factory):
    """The W4A16 demo export with its weights in model.onnx.data (as past the inline limit)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer, "INLINE_LIMIT", 0)
        mp.setattr(export_mod, "INLINE_LIMIT", 0)
        out = export(demo_checkpoint, tmp_path_factory.mktemp("ext") / "w4a16",
                     ExportOptions(request=QuantRequest(weight="w4a16"))).out_dir
    assert (out / writer.DATA_NAME).is_file()
    return out


@pytest.fixture
def truncated(external_export, tmp_path):
    out = tmp_path / "w4a16"
    shutil.copytree(external_export, out)
    data = out / writer.DATA_NAME
    with data.open("r+b") as f:
        f.truncate(data.stat().st_size // 2)
    return out


def test_an_intact_export_lists_its_one_data_file(external_export):
    onnx_path = external_export / "model.onnx"
    model = onnx.load(str(onnx_path), load_external_data=False)
    assert external_data_files(model, onnx_path) == [external_export / writer.DATA_NAME]


def test_the_check_names_the_short_file_and_the_tensor_past_its_end(truncated):
    onnx_path = truncated / "model.onnx"
    model = onnx.load(str(onnx_path), load_external_data=False)
    with pytest.raises(InputError, match=r"model\.onnx\.data: \d+ bytes, but model\.onnx needs \d+ "
                                         r"\(initializer .+ ends there\): the weights file is truncated"):
        external_data_files(model, onnx_path)


@pytest.mark.parametrize("command", [["compare"], ["build", "--backend", "tensorrt-rtx"], ["inspect"]])
def test_compare_build_and_inspect_refuse_a_truncated_data_file_in_one_line(truncated, command):
    r = CliRunner().invoke(cli, [*command, str(truncated)])
    text = r.output.strip()
    assert r.exit_code == 2, text[-3000:]
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert len(text.splitlines()) == 1 and "model.onnx.data" in text and "truncated" in text, text[-3000:]
