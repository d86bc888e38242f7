"""Fault test of the Attention op's check: an export whose graph feeds one layer's Attention node
its KV heads swapped (kv head 0 <-> 1) fails ``compare`` with exit 1, naming that layer; the same
export unmodified passes."""

from __future__ import annotations

import shutil

import numpy as np
import onnx
from click.testing import CliRunner

from metrale_export import contract
from metrale_export.cli.main import cli

LAYER = "model.layers.1.self_attn"


def _swap_kv_heads(onnx_path):
    model = onnx.load(str(onnx_path), load_external_data=False)
    node = next(n for n in model.graph.node if n.domain == contract.DOMAIN and n.op_type == "Attention"
                and any(a.name == "name" and a.s.decode() == LAYER for a in n.attribute))
    perm = onnx.numpy_helper.from_array(np.array([1, 0], dtype=np.int64), "fault_kv_perm")
    model.graph.initializer.append(perm)
    for slot, what in ((1, "key"), (2, "value")):
        swapped = f"fault_{what}_swapped"
        model.graph.node.insert(list(model.graph.node).index(node), onnx.helper.make_node(
            "Gather", [node.input[slot], "fault_kv_perm"], [swapped], axis=1, name=f"fault_{what}"))
        node.input[slot] = swapped
    onnx.save(model, str(onnx_path))


def test_swapped_kv_head_fails_compare_naming_the_layer(demo_exports, tmp_path):
    good = CliRunner().invoke(cli, ["compare", str(demo_exports["w4a16"])])
    assert good.exit_code == 0, good.output
    bad_dir = tmp_path / "swapped"
    shutil.copytree(demo_exports["w4a16"], bad_dir)
    _swap_kv_heads(bad_dir / "model.onnx")
    r = CliRunner().invoke(cli, ["compare", str(bad_dir)])
    assert r.exit_code == 1, r.output
    last = r.output.strip().splitlines()[-1]
    assert "layer 1" in last, last
