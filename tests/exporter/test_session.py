"""The export session: the auto rule, the manifest -> request mapping, the manifest reader's
format_version check, and the CLI opening a checkpoint once."""

from __future__ import annotations

import json

import pytest

from metrale_export.errors import InputError
from metrale_export.exporter import checkpoint as checkpoint_module
from metrale_export.exporter.manifest import FORMAT_VERSION, weight_quantization
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.exporter.session import open_model, read_manifest, request_from_manifest

REQUESTS = [
    QuantRequest(),
    QuantRequest(weight="w4a16"),
    QuantRequest(weight="w4a16", group_size=32, symmetric=False, quantize_lm_head=True),
    QuantRequest(weight="w8a8", w8a8_weight_scales="block128", w8a8_activation_scales="row_block128"),
    QuantRequest(weight="w4a4", moe_experts="dense"),
    QuantRequest(weight="declared"),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: f"{r.weight}-{r.group_size}-{r.moe_experts}")
def test_request_round_trips_through_the_manifest(request_):
    manifest = {"weight_quantization": json.loads(json.dumps(weight_quantization(request_)))}
    assert request_from_manifest(manifest) == request_


def test_exports_record_the_request_they_were_made_with(demo_exports):
    for fmt, out in demo_exports.items():
        assert request_from_manifest(read_manifest(out)) == QuantRequest(weight=fmt)


def test_auto_is_w4a16_for_a_float_checkpoint(demo_checkpoint):
    session = open_model(demo_checkpoint, {"weight": "auto", "group_size": 64})
    assert session.request == QuantRequest(weight="w4a16", group_size=64)
    assert isinstance(session.source, FloatSource)
    assert session.config.num_hidden_layers == 2
    assert open_model(demo_checkpoint).request == QuantRequest()


def test_open_model_refuses_unknown_request_fields(demo_checkpoint):
    with pytest.raises(TypeError, match="unknown request fields"):
        open_model(demo_checkpoint, {"weight": "auto", "groupsize": 64})


def test_declared_on_a_float_checkpoint_is_refused(demo_checkpoint):
    with pytest.raises(InputError, match="declares no quantization format"):
        open_model(demo_checkpoint, QuantRequest(weight="declared"))


def _manifest_dir(tmp_path, **fields):
    (tmp_path / "manifest.json").write_text(json.dumps(fields))
    return tmp_path


def test_read_manifest_checks_format_version(tmp_path):
    assert read_manifest(_manifest_dir(tmp_path, format_version=FORMAT_VERSION, x=1))["x"] == 1
    with pytest.raises(InputError, match=rf"format_version 99; this metrale-export reads format_version {FORMAT_VERSION}"):
        read_manifest(_manifest_dir(tmp_path, format_version=99))
    with pytest.raises(InputError, match="format_version None"):
        read_manifest(_manifest_dir(tmp_path, producer="metrale-export"))
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(InputError, match="not a readable manifest"):
        read_manifest(tmp_path)
    with pytest.raises(InputError, match="not an export directory"):
        read_manifest(tmp_path / "missing")


def test_cli_export_opens_the_checkpoint_once(demo_checkpoint, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from metrale_export.cli.main import cli

    calls = []
    real = checkpoint_module.Checkpoint.open.__func__

    def counting(cls, path, headers=None):
        calls.append(path)
        return real(cls, path, headers)

    monkeypatch.setattr(checkpoint_module.Checkpoint, "open", classmethod(counting))
    result = CliRunner().invoke(cli, ["export", str(demo_checkpoint), "-o", str(tmp_path / "o"),
                                      "--layers", "0", "--weight-quantization", "none", "--quiet"])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1, calls
    assert read_manifest(tmp_path / "o")["layers"] == [0]
