"""The non-projection ops (RMSNorm, FloatProj, Router): CPU references against float64 with the
stated bounds, the torch ops' outputs, ONNX export and ONNX Runtime through the contract's schemas,
and the qdq lowering's standard-ONNX expansions against the reference."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from metrale_export import contract
from metrale_export.engines.lowering import lower_qdq
from metrale_export.ops import norms, onnx_translation, router, tolerances
from metrale_export.ops import ort as mort
from metrale_export.ops import torch_ops  # noqa: F401


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("rows", [1, 3, 7, 31, 1000])
@pytest.mark.parametrize("variant", ["plain", "residual", "offset", "gate"])
def test_rms_norm_reference_within_its_bound_of_float64(rows, variant):
    g = torch.Generator().manual_seed(rows)
    k = 96
    x = torch.randn(rows, k, generator=g) * 3
    w = torch.randn(k, generator=g)
    res = torch.randn(rows, k, generator=g) if variant == "residual" else None
    gate = torch.randn(rows, k, generator=g) if variant == "gate" else None
    offset = int(variant == "offset")
    y, s = norms.rms_norm(x, w, res, gate, 1e-6, offset)
    ref = norms.rms_norm_f64(x, w, res, gate, 1e-6, offset)
    assert _rel(y, ref) <= tolerances.OP_NON_PROJECTION["RMSNorm"]
    assert torch.equal(s, x + res if res is not None else x)


def test_rms_norm_rounds_as_the_model_does_in_bf16():
    """Qwen3 rounds h * r to bf16 before the weight; the reference does too (not one rounding)."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(64, 128, generator=g).bfloat16(), torch.randn(128, generator=g).bfloat16()
    y, _ = norms.rms_norm(x, w, None, None, 1e-6, 0)
    h = x.float()
    qwen3 = w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16()
    assert y.dtype == torch.bfloat16
    # rsqrt vs 1/sqrt and the sum order: at most one bf16 step apart, mostly equal.
    assert (y.float() - qwen3.float()).abs().max() <= 2 ** -6 * qwen3.float().abs().max()
    assert (y == qwen3).float().mean() > 0.95


def test_router_ties_go_to_the_lower_expert_and_normalize():
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]])
    ids, w = router.route(logits, 2, 1)
    assert ids.tolist() == [[1, 2], [0, 1]] and ids.dtype == torch.int32
    assert torch.allclose(w.sum(-1), torch.ones(2))
    ids3, w3 = torch.ops.metrale.router(logits, 5, 3, 0, "moe", "r")
    assert ids3.tolist()[0] == [1, 2, 4]
    p = torch.softmax(logits.double(), -1)
    assert _rel(w3, p.gather(1, ids3.long())) <= tolerances.OP_NON_PROJECTION["Router"]


def test_router_refuses_top_k_above_the_experts():
    with pytest.raises(ValueError, match=r"top_k=6 must be in \[1, 5\]"):
        router.route(torch.zeros(2, 5), 6, 0)


class _Block(torch.nn.Module):
    """RMSNorm with a residual, an offset norm, a gated norm, FloatProj with a bias and the router."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("w", torch.randn(64, generator=g))
        self.register_buffer("wp", torch.randn(8, 64, generator=g).bfloat16())
        self.register_buffer("b", torch.randn(8, generator=g))

    def forward_proj(self, y3):
        return torch.ops.metrale.float_proj(y3, self.wp, self.b, 8, 64, "moe", "l0.gate")

    def forward(self, x, r):
        y, s = torch.ops.metrale.rms_norm(x, self.w, r, None, 64, 1e-6, 0, "", "l0.post")
        y2, _ = torch.ops.metrale.rms_norm(y, self.w, None, x, 64, 1e-5, 0, "", "l0.gated")
        y3, _ = torch.ops.metrale.rms_norm(y2, self.w, None, None, 64, 1e-6, 1, "", "l0.offset")
        logits = self.forward_proj(y3)
        ids, tw = torch.ops.metrale.router(logits, 8, 2, 1, "moe", "l0.router")
        return s, y3, logits, ids, tw


@pytest.fixture(scope="module")
def block_graph():
    m = _Block()
    x, r = torch.randn(3, 64), torch.randn(3, 64)
    program = torch.onnx.export(m, (x, r), dynamo=True, optimize=False, input_names=["x", "r"],
                                output_names=["s", "y", "logits", "ids", "tw"],
                                custom_translation_table=onnx_translation.translation_table(),
                                dynamic_shapes=({0: torch.export.Dim("m")}, {0: torch.export.Dim("m")}))
    proto = program.model_proto
    onnx_translation.compact_inputs(proto.graph)
    return m, proto


def test_export_writes_the_contract_nodes(block_graph):
    _, proto = block_graph
    nodes = {(n.op_type, len(n.input), len(n.output)) for n in proto.graph.node if n.domain == contract.DOMAIN}
    # the absent residual_out is dropped from the node; the gated norm has 3 inputs (x, weight, gate)
    assert nodes == {("RMSNorm", 3, 2), ("RMSNorm", 3, 1), ("RMSNorm", 2, 1), ("FloatProj", 3, 1), ("Router", 1, 2)}
    attrs = {a.name for n in proto.graph.node if n.op_type == "RMSNorm" for a in n.attribute}
    assert attrs == {"k", "epsilon", "weight_offset", "has_residual", "has_gate", "family", "name"}


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_onnx_runtime_and_the_qdq_expansion_match_the_torch_ops(block_graph, rows):
    m, proto = block_graph
    x, r = torch.randn(rows, 64), torch.randn(rows, 64)
    want = m(x, r)
    got = mort.reference_session(proto).run(None, {"x": x.numpy(), "r": r.numpy()})
    for g, w in zip(got, want):
        assert np.array_equal(g, w.numpy())  # the same reference on the same operands
    lowered = lower_qdq(proto)
    assert not [n for n in lowered.graph.node if n.domain == contract.DOMAIN]
    assert {"ReduceMean", "MatMul", "Softmax", "TopK"} <= {n.op_type for n in lowered.graph.node}
    sess = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    std = sess.run(None, {"x": x.numpy(), "r": r.numpy()})
    # Each stage against the torch op on the expansion's own input: the expansion keeps float32
    # reassociation, which can move y3 across a bfloat16 rounding of FloatProj's operand (a 2^-8
    # step of one element; 3e-5 norm-wise on the logits of one unseeded draw), so the logits are
    # checked on the expansion's y and the router on its logits.
    logits_of_y = m.forward_proj(torch.from_numpy(std[1]))
    ids_tw_of_logits = torch.ops.metrale.router(torch.from_numpy(std[2]), 8, 2, 1, "moe", "l0.router")
    stage_want = (want[0], want[1], logits_of_y, *ids_tw_of_logits)
    for name, g, w in zip(("s", "y", "logits", "ids", "tw"), std, stage_want):
        if name == "ids":
            assert np.array_equal(g, w.numpy())
        else:
            assert _rel(g, w.numpy()) <= 1e-5, name
