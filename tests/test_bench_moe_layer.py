"""benchmarks/bench_moe_layer.py's pure helpers: the router input that makes the real router ops pick a
given routing, the distinct-expert count, the memory bound, the L2 rotation."""

from __future__ import annotations

import os

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


def test_short_kernel_names_keep_the_template_and_drop_the_arguments():
    slot = ("void metrale::moeSlotKernel<metrale::W4A16Policy, (anonymous namespace)::W4A16View>"
            "(metrale::W4A16Policy::Params, (anonymous namespace)::W4A16View, int const*, int)")
    assert bml.short_kernel_name(slot) == "moeSlotKernel<W4A16Policy, W4A16View>"
    silu = ("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(at::TensorIteratorBase&)::"
            "{lambda()#1}, std::array<char*, 2ul> >(int, at::native::silu_kernel, std::array<char*, 2ul>)")
    got = bml.short_kernel_name(silu, width=400)
    assert got.startswith("at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel(") and got.endswith("2ul> >")
    assert bml.short_kernel_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD"
    assert len(bml.short_kernel_name("k<" + "a" * 200 + ">(int)", width=40)) == 40


def test_device_events_keep_only_the_device_activities():
    from types import SimpleNamespace as NS
    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [NS(name="metrale::w4a16_moe_proj", device_type=cpu, time_range=NS(start=0.0, end=50.0)),
              NS(name="void metrale::moeSlotKernel<P, V>(int)", device_type=cuda, time_range=NS(start=10.0, end=14.5))]
    assert bml.device_events(events) == [("void metrale::moeSlotKernel<P, V>(int)", 10.0, 14.5)]


def _synthetic_kernels(calls):
    """Per call: gate_up 6 us, silu 1 us, mul 1 us, down 3 us, combine twice 0.5 us; 2 us idle after."""
    kernels, t = [], 0.0
    for _ in range(calls):
        for name, d in (("void metrale::moeSlotKernel<A, V>(int)", 6.0), ("void silu<4>(int)", 1.0),
                        ("void mul<4>(int)", 1.0), ("void metrale::moeSlotKernel<B, V>(int)", 3.0),
                        ("void metrale::moeCombineKernel(int const*)", 0.5),
                        ("void metrale::moeCombineKernel(int const*)", 0.5)):
            kernels.append((name, t, t + d))
            t += d + 0.25
        t += 2.0
    return kernels, t - 2.0 - 0.25


def test_kernel_profile_per_layer_call():
    kernels, last_end = _synthetic_kernels(4)
    p = bml.kernel_profile(kernels, 4, "graph")
    assert p["source"] == "graph" and p["calls"] == 4
    assert p["busy_us"] == pytest.approx(12.0) and p["launches"] == pytest.approx(6.0)
    assert p["span_us"] == pytest.approx(last_end / 4)
    names = [k["name"] for k in p["kernels"]]
    assert names == ["moeSlotKernel<A, V>", "moeSlotKernel<B, V>", "moeCombineKernel", "mul<4>", "silu<4>"]
    by = {k["name"]: k for k in p["kernels"]}
    assert by["moeCombineKernel"]["us"] == pytest.approx(1.0) and by["moeCombineKernel"]["launches"] == 2.0
    assert by["moeSlotKernel<A, V>"]["share"] == pytest.approx(0.5)
    assert sum(k["share"] for k in p["kernels"]) == pytest.approx(1.0)


def test_kernel_profile_refuses_what_it_cannot_count():
    with pytest.raises(ValueError, match="calls"):
        bml.kernel_profile([("k", 0.0, 1.0)], 0, "graph")
    with pytest.raises(ValueError, match="no device activity"):
        bml.kernel_profile([], 3, "eager")
    with pytest.raises(ValueError, match="before it starts"):
        bml.kernel_profile([("k", 2.0, 1.0)], 1, "graph")


def test_the_profile_table_and_the_variant_path():
    kernels, _ = _synthetic_kernels(2)
    base = dict(shape="30B-A3B", fmt="w4a16", m=1, routing="uniform", path="slots", distinct=8.0, bound_us=5.0,
                router_gate_us=0.1, eager_us=90.0, graph_us=14.0, graph_unfused_us=15.0, vs_bound=2.8,
                eager_over_graph=6.4, router_ids_match=True, host_sync=None, variant=None)
    rows = [dict(base, profile=bml.kernel_profile(kernels, 2, "graph")), dict(base, variant="pdl", graph_us=12.0),
            dict(base, m=4)]
    main = bml.table(rows, "GPU", "abc1234", 4.0)
    assert sum(line.startswith("| 30B-A3B") for line in main) == 3
    assert any("| slots (pdl) |" in line for line in main)
    assert bml.profile_table([rows[1], rows[2]]) == []  # no profile, no table
    lines = bml.profile_table(rows)
    body = [line for line in lines if line.startswith("| 30B-A3B")]
    assert len(body) == 1 + 5 and all(b.count("|") == lines[lines.index(body[0]) - 2].count("|") for b in body)
    assert body[0].endswith("| graph | all kernels (span 14.4 us) | 12.0 | 6.0 | 1.00 |")
    assert body[1].endswith("| `moeSlotKernel<A, V>` | 6.00 | 1.00 | 0.50 |")
    assert "| `moeCombineKernel` | 1.00 | 2.00 | 0.08 |" in body[3]


def test_the_profile_table_names_a_failed_profile():
    row = dict(shape="30B-A3B", fmt="w4a4", m=16, routing="zipf", path="sorted", variant="wide",
               profile_error="ValueError: kernel_profile: no device activity recorded (eager)")
    lines = bml.profile_table([row])
    assert not any(line.startswith("| 30B-A3B") for line in lines)
    assert lines[-1] == ("- 30B-A3B w4a4 M=16 zipf sorted (wide): profile_error: ValueError: kernel_profile: "
                         "no device activity recorded (eager)")


def test_the_variant_list_is_checked_before_any_device_work():
    assert bml._list("wide,pdl,grid,all", bml.DECODE_VARIANTS) == ["wide", "pdl", "grid", "all"]
    with pytest.raises(SystemExit, match="nope"):
        bml.main(["--variant", "wide,nope"])


def test_the_fp8_variant_sets_its_own_variable_and_restores_both(monkeypatch):
    """``--variant fp8`` runs the W8A8 rows on the grouped FP8 tier (METRALE_MOE_FP8=1), leaving
    METRALE_MOE_DECODE as it was; both are restored after the block."""
    monkeypatch.setenv(bml.VARIANT_ENV, "wide")
    monkeypatch.delenv("METRALE_MOE_FP8", raising=False)
    with bml.decode_variant("fp8"):
        assert os.environ["METRALE_MOE_FP8"] == "1" and os.environ[bml.VARIANT_ENV] == "wide"
    assert "METRALE_MOE_FP8" not in os.environ and os.environ[bml.VARIANT_ENV] == "wide"
    with bml.decode_variant("pdl"):
        assert os.environ[bml.VARIANT_ENV] == "pdl" and "METRALE_MOE_FP8" not in os.environ
    assert os.environ[bml.VARIANT_ENV] == "wide"
    assert bml._list("fp8", bml.DECODE_VARIANTS) == ["fp8"]
