"""The quantization options table: one row per QuantRequest field, with the request's default and
the contract's choices; the Click options, the CLI's request, the manifest entry and its inverse
are made from it (the round trip itself: test_session.py)."""

from __future__ import annotations

import dataclasses

import click
import pytest

from metrale_export import contract
from metrale_export.cli.export import command as export_command
from metrale_export.errors import InputError
from metrale_export.exporter import quant_options
from metrale_export.exporter.quantization import QuantRequest


def test_one_row_per_request_field_with_its_default():
    fields = {f.name: f.default for f in dataclasses.fields(QuantRequest)}
    assert sorted(o.field for o in quant_options.OPTIONS) == sorted(fields)  # the table: in --help order
    for o in quant_options.OPTIONS:
        assert o.default == fields[o.field], o.field
        assert o.check(o.default).ok, o.field


def test_the_choices_are_the_contracts():
    by = quant_options.BY_FIELD
    assert by["group_size"].choices == contract.GROUP_SIZES
    assert by["w8a8_weight_scales"].choices == contract.W8A8.attribute("weight_scale_granularity").values
    assert contract.STATIC_ACTIVATION_SCALE not in by["w8a8_activation_scales"].choices
    assert set(by["w8a8_activation_scales"].choices) < set(contract.W8A8.attribute("activation_scale_granularity").values)
    assert by["moe_experts"].choices == contract.MOE_LAYOUTS


def test_every_row_is_an_export_option():
    params = {p.name: p for p in export_command.params}
    for o in quant_options.OPTIONS:
        p = params[o.param]
        assert o.flag_name in p.opts, (o.field, p.opts)
        if isinstance(p.type, click.Choice):
            assert tuple(p.type.choices) == (o.cli_choices or o.choices), o.field


def test_the_cli_defaults_give_the_default_request_but_auto(tmp_path):
    params = export_command.make_context("export", [str(tmp_path)]).params  # no flag given
    fields = quant_options.request_fields_from_cli(params)
    assert fields.pop("weight") == quant_options.AUTO
    assert QuantRequest(**fields) == QuantRequest()
    flagged = export_command.make_context("export", [str(tmp_path), "--group-size", "32", "--symmetric",
                                                     "--no-scale-search", "--quantize-lm-head"]).params
    assert quant_options.request_fields_from_cli(flagged) == {
        **fields, "weight": "auto", "group_size": 32, "symmetric": True, "scale_search": False,
        "quantize_lm_head": True}


def test_a_request_outside_the_choices_names_every_bad_field():
    with pytest.raises(InputError) as e:
        QuantRequest(group_size=48, w8a8_weight_scales="tensor")
    assert "--group-size: expected one of 32, 64, 128, found 48" in str(e.value)
    assert "--w8a8-weight-scales: expected one of channel, block128, found 'tensor'" in str(e.value)


def test_options_of_other_formats_are_none_or_absent_in_the_manifest():
    entry = quant_options.manifest_entry(QuantRequest(weight="w8a8"))
    assert entry["group_size"] is None and entry["asymmetric"] is None and "scale_search" not in entry
    assert entry["w8a8_weight_scales"] == "channel" and entry["moe_experts"] == "grouped"
    old = {k: v for k, v in entry.items() if k != "moe_experts"}  # a manifest from before the option
    assert QuantRequest(**quant_options.request_fields_from_manifest(old)) == QuantRequest(weight="w8a8")
