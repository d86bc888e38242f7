"""The four phases of ``replicate`` one by one, on a trace of the demo's first layer (the whole
expansion against a full trace is tests/exporter/test_replicate.py)."""

from __future__ import annotations

import onnx_ir as ir
import pytest
import torch

from metrale_export.exporter import demo, replicate
from metrale_export.exporter.export import trace
from metrale_export.exporter.session import open_model


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    return open_model(demo.write_demo(tmp_path_factory.mktemp("phases")))


@pytest.fixture
def traced(session):
    with torch.device("meta"):
        return trace(session.model(torch.float32, [0]))


def test_layer_nodes_attributes_every_scoped_node(traced):
    nodes_of = replicate.layer_nodes(traced.graph, [0])
    assert set(nodes_of) == {0} and nodes_of[0]
    assert all(replicate._layer_of(n) == 0 for n in nodes_of[0])
    unscoped = [n for n in traced.graph if replicate._layer_of(n) is None]
    assert unscoped and all(id(n) not in {id(m) for m in nodes_of[0]} for n in unscoped)
    with pytest.raises(replicate.NotReplicable, match="layer 0, which was not traced"):
        replicate.layer_nodes(traced.graph, [1])


def test_residual_stream_runs_from_the_embedding_to_the_final_norm(traced):
    res = replicate.residual_stream(traced.graph, replicate.layer_nodes(traced.graph, [0]))
    assert res.x_in[0] is res.x0
    assert res.x0.producer().op_type == "Gather"
    assert res.x_out[0] is not res.x0 and str(res.x_out[0].shape) == str(res.x0.shape)
    assert res.tail_uses and all(replicate._layer_of(node) is None for node, _ in res.tail_uses)


def test_clone_layer_renames_and_reads_its_own_weights(traced, session):
    graph = traced.graph
    nodes_of = replicate.layer_nodes(graph, [0])
    res = replicate.residual_stream(graph, nodes_of)
    with torch.device("meta"):
        two = session.model(torch.float32, [0, 1])
    made = []

    def new_initializer(name, like):
        made.append(name)
        return ir.Value(name=name, type=like.type, shape=like.shape.copy(), const_value=like.const_value)

    clones, state_in, state_out, x1 = replicate.clone_layer(
        graph, nodes_of[0], 0, 1, two.states[1], res.x_out[0], res, new_initializer)
    assert len(clones) == len(nodes_of[0])
    assert all(c.name.endswith(".layer1") for c in clones if c.name)
    assert [v.name for v in state_in] == ["past_key.1", "past_value.1"]
    assert [v.name for v in state_out] == ["present_key.1", "present_value.1"]
    assert made and all(n.startswith("model.layers.1.") for n in made)
    assert {v.name for c in clones for v in c.inputs if v is not None and v.is_initializer()} >= set(made)
    assert x1.producer() in clones
    reads_prev = [c for c in clones if any(v is res.x_out[0] for v in c.inputs)]
    assert reads_prev, "the clone reads the previous layer's residual output"
    names = [a.as_string() for c in clones for a in c.attributes.values() if a.type == ir.AttributeType.STRING]
    assert not [n for n in names if n.startswith("model.layers.0.")]


def test_order_nodes_puts_the_layers_between_head_and_tail(traced):
    graph = traced.graph
    nodes_of = replicate.layer_nodes(graph, [0])
    before = list(graph)
    replicate.order_nodes(graph, nodes_of, [nodes_of[0]])
    after = list(graph)
    assert sorted(map(id, after)) == sorted(map(id, before))
    pos = {id(n): k for k, n in enumerate(after)}
    for node in after:  # topologically sorted
        for v in node.inputs:
            if v is not None and v.producer() is not None and v.producer().graph is graph:
                assert pos[id(v.producer())] < pos[id(node)]
