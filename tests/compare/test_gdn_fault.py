"""Fault tests of the Gated DeltaNet ops' checks (compare, per op on ONNX Runtime's own inputs): an
export of the hybrid demo whose layer-2 GatedDeltaRule node reads its A_log with two value heads
swapped, or whose layer-0 conv weight has one tap changed, fails ``compare`` with exit 1, naming
that layer and op; the same export unmodified passes with both ops' errors within their bounds."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli


@pytest.fixture(scope="module")
def hybrid_export(hybrid_w4a16_export):
    return hybrid_w4a16_export


def _edit_initializer(onnx_path, name, change):
    model = onnx.load(str(onnx_path), load_external_data=False)
    init = next(t for t in model.graph.initializer if t.name == name)
    arr = change(onnx.numpy_helper.to_array(init).copy())
    init.CopyFrom(onnx.numpy_helper.from_array(arr, name))
    onnx.save(model, str(onnx_path))


def _swap_heads(a):
    a[[0, 1]] = a[[1, 0]]
    return a


def _one_tap(w):
    w[5, 0, 2] += 0.25
    return w


def test_gdn_ops_pass_compare_within_their_bounds(hybrid_export):
    r = CliRunner().invoke(cli, ["compare", str(hybrid_export), "--json"])
    assert r.exit_code == 0, r.output
    rows = [o for o in json.loads(r.stdout)["ops"] if o["op_type"] in ("CausalConv1d", "GatedDeltaRule")]
    assert len(rows) == 2 * 2 * 2  # two GDN layers, two ops, prefill and decode
    assert all(o["rel_error"] <= o["bound"] for o in rows), rows


@pytest.mark.parametrize("name,change,layer,op", [
    ("model.layers.2.linear_attn.A_log", _swap_heads, 2, "GatedDeltaRule"),
    ("model.layers.0.linear_attn.conv1d.weight", _one_tap, 0, "CausalConv1d"),
])
def test_corrupted_gdn_weight_fails_compare_naming_the_layer(hybrid_export, tmp_path, name, change, layer, op):
    bad = tmp_path / "bad"
    shutil.copytree(hybrid_export, bad)
    _edit_initializer(bad / "model.onnx", name, change)
    r = CliRunner().invoke(cli, ["compare", str(bad)])
    assert r.exit_code == 1, r.output
    last = r.output.strip().splitlines()[-1]
    assert f"layer {layer}" in last and op in last, last
