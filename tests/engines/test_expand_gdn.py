"""The standard-ONNX expansions of the Gated DeltaNet ops (engines/expand.py: CausalConv1d as Conv,
GatedDeltaRule as a Scan over the tokens) in the qdq lowering and in the plugin lowering where the
op has no plugin (set here): no metrale node is left, and ONNX Runtime computes the op's formula
within float32 reassociation of the CPU reference (ops/gdn.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnxruntime as ort
import pytest
import torch

from metrale_export import contract
from metrale_export.engines import lowering
from metrale_export.ops import gdn as G
from metrale_export.ops import torch_ops  # noqa: F401
from support.graphs import GDN_DYNAMIC_SHAPES, traced_graph

HK, HV, DK, DV, C, K = 2, 4, 16, 8, 2 * 2 * 16 + 4 * 8, 4


class _Gdn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("w", torch.randn(C, 1, K, generator=g) * 0.3)
        self.register_buffer("a_log", torch.randn(HV, generator=g))
        self.register_buffer("dt_bias", torch.randn(HV, generator=g))

    def forward(self, x, conv_state, ba, state):
        y, cs = torch.ops.metrale.causal_conv1d(x, self.w, conv_state, C, K, "gdn", "layers.0.linear_attn.conv1d")
        o, st = torch.ops.metrale.gated_delta_rule(y, ba, self.a_log, self.dt_bias, state, HK, HV, DK, DV, "gdn",
                                                   "layers.0.linear_attn")
        return o, cs, st


def _inputs(b, s, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, s, C, generator=g), torch.randn(b, C, K - 1, generator=g),
            torch.randn(b, s, 2 * HV, generator=g) * 2, torch.randn(b, HV, DK, DV, generator=g) * 0.5)


@pytest.fixture(scope="module")
def graph():
    m = _Gdn().eval()
    model = traced_graph(m, _inputs(2, 3, 0), GDN_DYNAMIC_SHAPES)
    assert [n.op_type for n in model.graph.node if n.domain == contract.DOMAIN] == ["CausalConv1d", "GatedDeltaRule"]
    return m, model


@pytest.mark.parametrize("path", ["qdq", "plugin"])
@pytest.mark.parametrize("b,s", [(1, 1), (3, 7), (2, 33)])
def test_expanded_gdn_ops_are_the_reference_within_reassociation(graph, path, b, s, monkeypatch):
    m, model = graph
    for t in ("CausalConv1d", "GatedDeltaRule"):
        monkeypatch.setitem(contract.OPS, t, dataclasses.replace(contract.OPS[t], has_plugin=False))
    lowered = lowering.lower_qdq(model) if path == "qdq" else lowering.lower_plugins(model, {})
    assert not [n for n in lowered.graph.node if n.domain == contract.DOMAIN]
    assert {"Conv", "Scan"} <= {n.op_type for n in lowered.graph.node}
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    ins = _inputs(b, s, 100 * b + s)
    names = [i.name for i in sess.get_inputs()]
    got = sess.run(None, dict(zip(names, (t.numpy() for t in ins))))
    want = m(*ins)
    for g_, w_ in zip(got, want):
        assert g_.shape == tuple(w_.shape)
        np.testing.assert_allclose(g_, w_.numpy(), rtol=1e-4, atol=1e-5)
    # The conv's new state is a copy of the inputs: exact.
    np.testing.assert_array_equal(got[1], want[1].numpy())


def test_with_their_plugins_the_plugin_lowering_keeps_them(graph, monkeypatch):
    _, model = graph
    for t in ("CausalConv1d", "GatedDeltaRule"):
        monkeypatch.setitem(contract.OPS, t, dataclasses.replace(contract.OPS[t], has_plugin=True))
    lowered = lowering.lower_plugins(model, {})
    assert [n.op_type for n in lowered.graph.node if n.domain == contract.DOMAIN] == ["CausalConv1d", "GatedDeltaRule"]
    assert not {"Conv", "Scan"} & {n.op_type for n in lowered.graph.node}


def test_reference_in_float64_agrees():
    """The float32 reference against the same formula in float64 (torch's reductions, no rounding)."""
    m = _Gdn()
    x, cs, ba, st = _inputs(2, 9, 7)
    y, _ = G.causal_conv1d(x, m.w, cs)
    o, s1 = G.gated_delta_rule(y, ba, m.a_log, m.dt_bias, st, HK, HV, DK, DV)
    o64, s64 = G.gated_delta_rule_f64(y, ba, m.a_log, m.dt_bias, st, HK, HV, DK, DV)
    assert (o.double() - o64).abs().max() <= 1e-5 * o64.abs().max()
    assert (s1.double() - s64).abs().max() <= 1e-5 * s64.abs().max()
