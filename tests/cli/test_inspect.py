"""``metrale-export inspect`` on real exports of the demo models (cli/inspect.py): what the text
shows of the manifest, and the inputs/outputs lines kept short however many layers there are."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.exporter.demo import write_moe_demo
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.quantization import QuantRequest


def _inspect(path) -> list[str]:
    r = CliRunner().invoke(cli, ["inspect", str(path), "--no-ops"])
    assert r.exit_code == 0, r.output[-3000:]
    return r.output.splitlines()


def _line(lines, start: str) -> str:
    return next(line for line in lines if line.startswith(start))


def test_a_dense_export_shows_no_moe_expert_form(demo_exports):
    model = _line(_inspect(demo_exports["w4a16"]), "model: ")
    assert "weights: w4a16 (" in model
    assert "moe_experts" not in model, model


@pytest.fixture(scope="module")
def moe_export(tmp_path_factory):
    base = tmp_path_factory.mktemp("moe")
    ckpt = write_moe_demo(base / "ckpt")
    return export(ckpt, base / "out", ExportOptions(request=QuantRequest(weight="w8a8", moe_experts="dense"))).out_dir


def test_an_moe_export_shows_its_expert_form(moe_export):
    assert "moe_experts=dense" in _line(_inspect(moe_export), "model: ")


def test_per_layer_states_are_one_entry_each(demo_exports):
    lines = _inspect(demo_exports["w4a16"])
    inputs, outputs = _line(lines, "inputs:  "), _line(lines, "outputs: ")
    assert inputs == ("inputs:  input_ids['batch', 'seq'], position_ids['batch', 'seq'], "
                      "past_key.{0-1}['batch', 2, 'past', 64] (2 layers), "
                      "past_value.{0-1}['batch', 2, 'past', 64] (2 layers)"), inputs
    assert re.search(r"present_key\.\{0-1\}\[.+\] \(2 layers\)", outputs), outputs


def test_the_summary_does_not_grow_with_the_layers():
    from metrale_export.cli.inspect import per_layer_summary

    state = ["batch", 8, "past", 128]
    values = {"input_ids": ["batch", "seq"]}
    for i in [*range(0, 40), 45, 47, 48]:
        values[f"past_key.{i}"] = state
        values[f"past_value.{i}"] = state
    values["conv_state.3"] = ["batch", 4, 2048]  # one layer of another kind: named as it is
    line = per_layer_summary(values)
    assert line == ("input_ids['batch', 'seq'], past_key.{0-39,45,47-48}['batch', 8, 'past', 128] (43 layers), "
                    "past_value.{0-39,45,47-48}['batch', 8, 'past', 128] (43 layers), "
                    "conv_state.3['batch', 4, 2048]")
