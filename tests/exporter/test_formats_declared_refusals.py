"""Declared-format readers refuse contradictory checkpoints with one line that names the file or
tensor: a projection the config excludes from quantization but whose quantized tensors are stored
(DeclaredSource.stored_unless_excluded), and a quantization config file that is not a JSON object
(checkpoint.read_json_object)."""

from __future__ import annotations

import json

import pytest

from metrale_export.errors import CheckpointError, InputError
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.formats.gptq import GptqSource
from support import checkpoints as T


def _exclude(ckpt_dir, name: str) -> None:
    cfg_path = ckpt_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"]["modules_to_not_convert"] = ["lm_head", name]
    cfg_path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("fmt, marker", [("fp8_block", "weight_scale_inv"), ("gptq", "qweight")])
def test_an_excluded_projection_with_stored_quantized_tensors_is_refused(tmp_path, fmt, marker):
    d = {"fp8_block": T.write_fp8_block, "gptq": T.write_gptq}[fmt](tmp_path / fmt)
    excluded, kept = T.projection_names()[0], T.projection_names()[1]
    _exclude(d, excluded)
    src = T.source_for(d)
    assert src.is_quantized(kept, f"{kept}.weight")
    with pytest.raises(CheckpointError) as e:
        src.is_quantized(excluded, f"{excluded}.weight")
    assert str(e.value) == (f"{d}: {excluded}: listed in modules_to_not_convert, but the checkpoint stores its "
                            f"{marker}")


@pytest.mark.parametrize("content, message", [("{not json", "not readable JSON"),
                                              ("[4, 128]", "expected a JSON object")])
def test_a_gptq_quantize_config_that_is_not_a_json_object_is_refused(tmp_path, content, message):
    d = T.write_gptq(tmp_path / "gptq")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["quantization_config"]
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "quantize_config.json").write_text(content)
    ckpt = Checkpoint.open(d)
    assert GptqSource.detect(ckpt)
    with pytest.raises(InputError, match=rf"^{d / 'quantize_config.json'}: {message}"):
        GptqSource.read_qconfig(ckpt)


def _set_qconfig(ckpt_dir, **fields) -> None:
    cfg_path = ckpt_dir / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"].update(fields)
    cfg_path.write_text(json.dumps(cfg))


@pytest.mark.parametrize("fmt, fields, words", [
    ("fp8_block", {"fmt": "e5m2", "activation_scheme": "static"},
     ("fmt 'e5m2'; only e4m3 is supported", "activation_scheme 'static'; only 'dynamic' is supported")),
    ("gptq", {"bits": 8, "checkpoint_format": "marlin"},
     ("8-bit weights; only 4-bit is supported", "checkpoint_format 'marlin'")),
])
def test_a_declaration_with_two_faults_reports_both_on_one_line(tmp_path, fmt, fields, words):
    d = {"fp8_block": T.write_fp8_block, "gptq": T.write_gptq}[fmt](tmp_path / fmt)
    _set_qconfig(d, **fields)
    with pytest.raises(InputError) as e:
        T.source_for(d)
    message = str(e.value)
    assert "\n" not in message and all(w in message for w in words), message
    assert message.count(": ") >= 2 and "; " in message
