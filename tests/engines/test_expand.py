"""The standard-ONNX expansion of the Attention op (engines/expand.py) in the qdq lowering, and in
the plugin lowering where the op has no plugin (set here: the contract gives it one): the lowered
graph has no metrale node left and computes the op within its bound in ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from metrale_export import contract
from metrale_export.engines import lowering
from metrale_export.ops import attention as A
from metrale_export.ops import torch_ops  # noqa: F401
from support.graphs import traced_graph


class _Attn(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.ops.metrale.attention(q, k, v, 8, 2, 64, 0.125, "attn", "layers.0.self_attn")


@pytest.fixture(scope="module")
def graph():
    q, k, v = torch.randn(1, 8, 3, 64), torch.randn(1, 2, 5, 64), torch.randn(1, 2, 5, 64)
    model = traced_graph(_Attn().eval(), (q, k, v), {"q": {0: "batch", 2: "seq"}, "k": {0: "batch", 2: "total"},
                                                      "v": {0: "batch", 2: "total"}})
    assert [n.op_type for n in model.graph.node if n.domain == contract.DOMAIN] == ["Attention"]
    return model


@pytest.mark.parametrize("path", ["qdq", "plugin"])
@pytest.mark.parametrize("b,s,t", [(1, 1, 1), (2, 7, 300), (3, 33, 33)])
def test_expanded_attention_is_within_the_op_bound(graph, path, b, s, t, monkeypatch):
    import dataclasses

    monkeypatch.setitem(contract.OPS, "Attention", dataclasses.replace(contract.OPS["Attention"], has_plugin=False))
    lowered = lowering.lower_qdq(graph) if path == "qdq" else lowering.lower_plugins(graph, {})
    assert not [n for n in lowered.graph.node if n.domain == contract.DOMAIN]
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    g = torch.Generator().manual_seed(b * 1000 + t)
    q = torch.randn(b, 8, s, 64, generator=g)
    k, v = torch.randn(b, 2, t, 64, generator=g), torch.randn(b, 2, t, 64, generator=g)
    (out,) = sess.run(None, {"q": q.numpy(), "k": k.numpy(), "v": v.numpy()})
    assert out.shape == (b, s, 8, 64)
    # The expansion rounds q, k, v and P to bf16 as the op does (docs/ops.md, Attention, Operands).
    # Within one 64-key block it is the op's arithmetic to float32 noise; over several blocks the
    # op rounds each block's p against the running maximum, the expansion against the row's, so a
    # few P elements land one bf16 step apart (6.8e-4 at T = 300). The unrounded float32 formula
    # was 5e-3 away (a bf16 step of every operand), which both limits reject.
    ref = A.attention_reference(q, k, v, 0.125).double()
    err = float((ref - torch.from_numpy(out).double()).abs().max())
    assert err < (1e-5 if t <= 64 else 1e-3), err
    # And the op's own bound against the exact float64 value still holds for the expansion.
    probs = torch.softmax((q.double().reshape(b, 2, 4, s, 64) @ k.double()[:, :, None].transpose(-1, -2) * 0.125)
                          .masked_fill(torch.arange(t)[None, :] > (t - s + torch.arange(s))[:, None], float("-inf")),
                          dim=-1)
    exact = (probs @ v.double()[:, :, None]).reshape(b, 8, s, 64).transpose(1, 2)
    bnd = A.bound(q, k, v, 0.125)
    assert bool(((ref - torch.from_numpy(out).double()).abs() <= bnd + 2.0 ** -8 * exact.abs()).all())


def test_with_its_plugin_the_plugin_lowering_keeps_attention(graph):
    assert contract.op("Attention").has_plugin
    lowered = lowering.lower_plugins(graph, {})
    assert [n.op_type for n in lowered.graph.node if n.domain == contract.DOMAIN] == ["Attention"]
