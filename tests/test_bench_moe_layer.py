"""benchmarks/bench_moe_layer.py's pure helpers: the router input that makes the real router ops pick a
given routing, the distinct-expert count, the memory bound, the L2 rotation."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_moe_layer as bml
from benchmarks.bench_kernels import L2_BYTES
from metrale_export.ops import torch_ops  # noqa: F401  (registers torch.ops.metrale.*)


def _routes(m, e, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(m)]).to(torch.int32)


@pytest.mark.parametrize("e,k", [(128, 8), (512, 10)])
def test_the_router_ops_pick_the_routing_under_test(e, k):
    h, ids = 2048, _routes(5, e, k, e)
    x = bml.router_input(ids, h, torch.Generator().manual_seed(1))
    assert x.dtype == torch.bfloat16 and x.shape == (5, h)
    logits = torch.ops.metrale.float_proj(x, bml.router_weight(e, h, "cpu"), None, e, h, "moe", "t.gate")
    got, w = torch.ops.metrale.router(logits, e, k, 1, "moe", "t.router")
    assert torch.equal(got, ids)  # the same experts, in the same order
    assert torch.all(w[:, :-1] > w[:, 1:]) and torch.allclose(w.float().sum(-1), torch.ones(5), atol=2e-2)


def test_router_helpers_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="hidden size"):
        bml.router_weight(512, 256, "cpu")
    with pytest.raises(ValueError, match="noise"):
        bml.router_input(_routes(1, 64, 16, 0), 128)


def test_distinct_experts_and_the_bound():
    ids = torch.tensor([[3, 7, 1], [7, 3, 9]], dtype=torch.int32)
    assert bml.distinct_experts(ids) == 4
    # 8 experts of 1 MB at 4 TB/s (read + write, the copy's count): 2 us
    assert bml.bound_seconds(8, 1_000_000, 4.0) == pytest.approx(2e-6)


def test_layer_copies_exceed_the_l2_at_m1():
    for expert_bytes, top_k in ((2_430_000, 8), (1_600_000, 10), (50_000_000, 10)):
        c = bml.layer_copies(expert_bytes, top_k)
        assert c >= 2 and c * expert_bytes * top_k > 2.2 * L2_BYTES


def test_path_follows_the_slot_bound():
    assert bml.path_of(8, 8) == "slots" and bml.path_of(9, 8) == "sorted" and bml.path_of(64, 10) == "sorted"


def test_the_table_shows_a_failed_capture_and_a_host_sync():
    ok = dict(shape="30B-A3B", fmt="w4a16", m=1, routing="uniform", path="slots", distinct=8.0, bound_us=5.0,
              router_gate_us=0.1, eager_us=90.0, graph_us=6.0, graph_unfused_us=7.0, vs_bound=1.2,
              eager_over_graph=15.0, router_ids_match=True, host_sync=None)
    bad = dict(ok, m=64, path="sorted", graph_us=None, vs_bound=None, eager_over_graph=None, router_ids_match=False,
               host_sync="RuntimeError: called a synchronizing CUDA operation", graph_error="RuntimeError: capture")
    del bad["vs_bound"], bad["eager_over_graph"]
    lines = bml.table([ok, bad], "GPU", "abc1234", 4.0)
    rows = [line for line in lines if line.startswith("| 30B-A3B")]
    assert len(rows) == 2 and all(r.count("|") == lines[4].count("|") for r in rows)
    assert "| 6.0 | 7.0 | 1.20 | 15.00 |" in rows[0] and rows[0].endswith("| ok | none |")
    assert "capture failed" in rows[1] and rows[1].endswith("| DIFFER | SYNCS |")
    assert any("M=64 uniform: graph_error: RuntimeError: capture" in line for line in lines)
    assert any("M=64 uniform: host_sync: RuntimeError" in line for line in lines)
