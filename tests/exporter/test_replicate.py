"""Replicated tracing (one decoder layer per kind, cloned for the others) against tracing every layer:
the same graph inputs, outputs and weight initializers, and bitwise-equal ONNX Runtime outputs, for
the dense demo, a dense model of five layers and the hybrid demo (GDN and gated attention, MoE and
dense FFN), unquantized and in every weight format."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from safetensors.torch import save_file
from support.checkpoints import add_mtp_head
from support.stateful import ort_steps

from metrale_export import contract
from metrale_export.exporter import demo, demo_hybrid, replicate
from metrale_export.exporter.checkpoint import Checkpoint
from metrale_export.exporter.config import parse_config
from metrale_export.exporter.export import ExportOptions, export, select_source
from metrale_export.exporter.layers.model import CausalLM
from metrale_export.exporter.quantization import QuantRequest
from metrale_export.ops.ort import reference_session

FORMATS = ("none", "w4a16", "w8a8", "w4a4")


def _write(path, config, tensors):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path / "model.safetensors"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    base = tmp_path_factory.mktemp("replicate")
    dense5 = dict(demo.DEMO_CONFIG, num_hidden_layers=5)
    return {
        "demo": demo.write_demo(base / "demo"),
        "dense5": _write(base / "dense5", dense5, demo.demo_tensors(dense5, seed=3)),
        "hybrid": demo_hybrid.write_hybrid_demo(base / "hybrid"),
        "hybrid-mtp": _with_mtp(demo_hybrid.write_hybrid_demo(base / "hybrid-mtp")),
    }


def _with_mtp(path):
    add_mtp_head(path.parent)
    return path


def _meta_model(path, request=QuantRequest()):
    ckpt = Checkpoint.open(path)
    cfg = parse_config(ckpt.config)
    with torch.device("meta"):
        return CausalLM(cfg, select_source(ckpt, request))


def test_layers_of_one_kind_share_a_representative(checkpoints):
    assert set(replicate.representatives(_meta_model(checkpoints["dense5"])).values()) == {0}
    # linear attention + MoE (0, 2), full attention + MoE (1), full attention + dense FFN (3)
    assert replicate.representatives(_meta_model(checkpoints["hybrid"])) == {0: 0, 1: 1, 2: 0, 3: 3}


def _value_info(values):
    return [(v.name, v.type.SerializeToString()) for v in values]


def _weights(model):
    return sorted(i.name for i in model.graph.initializer if i.name.startswith(("model.", "lm_head.")))


def _feeds(sess, vocab, rng):
    sizes = {"batch": 2, "seq": 3, "past": 5}
    feeds = {}
    for v in sess.get_inputs():
        shape = [sizes[d] if isinstance(d, str) else d for d in v.shape]
        if v.name == "input_ids":
            feeds[v.name] = rng.integers(0, vocab, shape).astype(np.int64)
        elif v.name == "position_ids":
            feeds[v.name] = np.broadcast_to(np.arange(5, 8), shape).astype(np.int64).copy()
        else:
            feeds[v.name] = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    return feeds


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ("demo", "dense5", "hybrid"))
def test_replicated_export_equals_full_trace(checkpoints, tmp_path, name, fmt):
    _check_replicated(checkpoints[name], tmp_path, fmt)


def test_replicated_export_keeps_the_hidden_state_output(checkpoints, tmp_path):
    """With an MTP head, the main graph's last output is ``hidden_states``, replicated or not."""
    _check_replicated(checkpoints["hybrid-mtp"], tmp_path, "w4a16")
    graph = onnx.load(str(tmp_path / "True" / "model.onnx"), load_external_data=False).graph
    assert graph.output[-1].name == "hidden_states"


def _check_replicated(path, tmp_path, fmt):
    full, rep = (export(path, tmp_path / f"{r}", ExportOptions(request=QuantRequest(weight=fmt),
                                                                  replicate_layers=r)).out_dir
                 for r in (False, True))
    a, b = (onnx.load(str(d / "model.onnx")) for d in (full, rep))
    assert any(n.name.endswith(".layer1") or n.name.endswith(".layer2") for n in b.graph.node)  # cloned
    assert not any(".layer" in n.name for n in a.graph.node)
    assert _value_info(b.graph.input) == _value_info(a.graph.input)
    assert _value_info(b.graph.output) == _value_info(a.graph.output)
    assert _weights(b) == _weights(a)
    assert sorted(n.op_type for n in b.graph.node) == sorted(n.op_type for n in a.graph.node)
    metrale = sorted(onnx.helper.get_attribute_value(at).decode() for n in b.graph.node
                     if n.domain == contract.DOMAIN for at in n.attribute if at.name == "name")
    assert metrale == sorted(onnx.helper.get_attribute_value(at).decode() for n in a.graph.node
                             if n.domain == contract.DOMAIN for at in n.attribute if at.name == "name")

    sa, sb = reference_session(a), reference_session(b)
    vocab = json.loads((path.parent / "config.json").read_text())["vocab_size"]
    feeds = _feeds(sa, vocab, np.random.default_rng(0))
    for out, x, y in zip(sa.get_outputs(), sa.run(None, feeds), sb.run(None, feeds)):
        assert x.shape == y.shape and x.tobytes() == y.tobytes(), out.name
    ids = np.random.default_rng(1).integers(0, vocab, (2, 6)).astype(np.int64)
    for x, y in zip(ort_steps(sa, ids, [4, 1, 1]), ort_steps(sb, ids, [4, 1, 1])):
        assert x.tobytes() == y.tobytes()


def test_a_graph_it_cannot_read_falls_back_to_the_full_trace(checkpoints, tmp_path, monkeypatch, caplog):
    def refuse(*a, **k):
        raise replicate.NotReplicable("test")

    monkeypatch.setattr(replicate, "replicate", refuse)
    out = export(checkpoints["dense5"], tmp_path / "out", ExportOptions()).out_dir
    assert "tracing every layer" in caplog.text
    model = onnx.load(str(out / "model.onnx"))
    assert [v.name for v in model.graph.input][-2:] == ["past_key.4", "past_value.4"]
