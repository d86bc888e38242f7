"""The Gated DeltaNet ops' CPU reference (ops/gdn.py) and ONNX Runtime op: the formula against
float64 and torch's conv1d, a sequence's bits alone vs inside a batch, in one call vs in chunks of
1, 7 and the rest vs token by token (the states carried between calls), and the ONNX Runtime op
(ai.onnx.contrib) bitwise the torch op's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from metrale_export import contract
from metrale_export.ops import gdn as G
from metrale_export.ops import tolerances, torch_ops  # noqa: F401
from support.graphs import GDN_DYNAMIC_SHAPES, traced_graph

HK, HV, DK, DV, K = 2, 4, 32, 16, 4
C = 2 * HK * DK + HV * DV


def _weights(seed=1, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(C, 1, K, generator=g) * 0.3).to(dtype), torch.randn(HV, generator=g).to(dtype),
            torch.randn(HV, generator=g).to(dtype))


def _inputs(b, s, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(b, s, C, generator=g)).to(dtype), torch.randn(b, C, K - 1, generator=g).to(dtype),
            (torch.randn(b, s, 2 * HV, generator=g) * 2).to(dtype), torch.randn(b, HV, DK, DV, generator=g) * 0.5)


def _layer(x, cs, ba, st, w, a_log, dt_bias):
    """The conv, then the rule on its output: (y, conv_state, state)."""
    y, cs = torch.ops.metrale.causal_conv1d(x, w, cs, C, K, "gdn", "conv")
    o, st = torch.ops.metrale.gated_delta_rule(y, ba, a_log, dt_bias, st, HK, HV, DK, DV, "gdn", "rule")
    return o, cs, st


def test_conv_is_torch_conv1d_in_float64_then_silu():
    w, _, _ = _weights()
    x, cs, _, _ = _inputs(3, 11, 2)
    y, new = G.causal_conv1d(x, w, cs)
    full = torch.cat((cs, x.transpose(1, 2)), dim=-1).double()
    want = torch.nn.functional.silu(torch.nn.functional.conv1d(full, w.double(), groups=C)).transpose(1, 2)
    assert (y.double() - want).abs().max() <= 1e-6 * want.abs().max()
    assert torch.equal(new, full[:, :, -(K - 1):].float())


@pytest.mark.parametrize("s", [1, 7, 33])
def test_rule_is_the_float64_formula_within_its_bound(s):
    w, a_log, dt_bias = _weights()
    x, _, ba, st = _inputs(2, s, 3)
    o, s1 = G.gated_delta_rule(x, ba, a_log, dt_bias, st, HK, HV, DK, DV)
    o64, s64 = G.gated_delta_rule_f64(x, ba, a_log, dt_bias, st, HK, HV, DK, DV)
    assert (o.double() - o64).norm() <= tolerances.GDN_F64 * o64.norm()
    assert (s1.double() - s64).norm() <= tolerances.GDN_F64 * s64.norm()


def test_rule_matches_transformers_recurrent_form():
    """The exporter's formula is transformers' torch_recurrent_gated_delta_rule (l2norm in the kernel)."""
    mod = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")
    _, a_log, dt_bias = _weights()
    x, _, ba, st = _inputs(1, 9, 4)
    o, s1 = G.gated_delta_rule(x, ba, a_log, dt_bias, st, HK, HV, DK, DV)
    q = x[..., :HK * DK].reshape(1, 9, HK, DK).repeat_interleave(HV // HK, dim=2)
    k = x[..., HK * DK:2 * HK * DK].reshape(1, 9, HK, DK).repeat_interleave(HV // HK, dim=2)
    v = x[..., 2 * HK * DK:].reshape(1, 9, HV, DV)
    beta = ba[..., :HV].sigmoid()
    g = -a_log.exp() * torch.nn.functional.softplus(ba[..., HV:] + dt_bias)
    want, ws = mod.torch_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=st, output_final_state=True,
                                                    use_qk_l2norm_in_kernel=True)
    assert (o - want).abs().max() <= 1e-5 * want.abs().max()
    assert (s1 - ws).abs().max() <= 1e-5 * ws.abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_sequence_alone_and_in_a_batch_has_the_same_bits(dtype):
    w, a_log, dt_bias = _weights(dtype=dtype)
    batch = _inputs(5, 6, 5, dtype)
    together = _layer(*batch, w, a_log, dt_bias)
    for i in (0, 3):
        alone = _layer(*(t[i:i + 1] for t in batch), w, a_log, dt_bias)
        for a, b in zip(alone, together):
            assert torch.equal(a[0], b[i])


@pytest.mark.parametrize("chunks", [[13], [1, 7, 5], [1] * 13, [7, 6]])
def test_chunked_calls_give_the_bits_of_one_call(chunks):
    """The recurrent form: any split of the sequence into calls, the states carried, gives the same
    outputs and states bit for bit."""
    w, a_log, dt_bias = _weights()
    x, cs, ba, st = _inputs(2, 13, 6)
    whole = _layer(x, cs, ba, st, w, a_log, dt_bias)
    outs, pos = [], 0
    for n in chunks:
        o, cs, st = _layer(x[:, pos:pos + n], cs, ba[:, pos:pos + n], st, w, a_log, dt_bias)
        outs.append(o)
        pos += n
    assert torch.equal(torch.cat(outs, dim=1), whole[0])
    assert torch.equal(cs, whole[1]) and torch.equal(st, whole[2])


def test_shape_errors_name_the_op():
    w, a_log, dt_bias = _weights()
    x, cs, ba, st = _inputs(1, 2, 7)
    with pytest.raises(ValueError, match="GatedDeltaRule"):
        G.gated_delta_rule(x[..., :-1], ba, a_log, dt_bias, st, HK, HV, DK, DV)
    with pytest.raises(ValueError, match="CausalConv1d"):
        G.causal_conv1d(x, w[:, :, :2], cs)


def test_contract_states_the_kernel_limits():
    spec = contract.op("GatedDeltaRule")
    assert spec.category == "recurrence" and spec.output("state_out").dtype == "float32"
    assert spec.input("state").dtype == "float32"
    assert contract.GDN_HEAD_K_DIMS == (64, 128) and contract.GDN_HEAD_V_BLOCK == 32
    assert contract.op("CausalConv1d").present_outputs({}) == ("y", "conv_state_out")


class _Both(torch.nn.Module):
    def __init__(self):
        super().__init__()
        w, a_log, dt_bias = _weights()
        self.register_buffer("w", w)
        self.register_buffer("a_log", a_log)
        self.register_buffer("dt_bias", dt_bias)

    def forward(self, x, conv_state, ba, state):
        return _layer(x, conv_state, ba, state, self.w, self.a_log, self.dt_bias)


def test_onnx_runtime_op_is_the_torch_op_bitwise(tmp_path):
    from metrale_export.ops.ort import reference_session

    m = _Both().eval()
    model = traced_graph(m, _inputs(1, 2, 0), GDN_DYNAMIC_SHAPES)
    sess = reference_session(model)
    ins = _inputs(3, 5, 9)
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], (t.numpy() for t in ins))))
    for g, w in zip(got, m(*ins)):
        np.testing.assert_array_equal(g, w.numpy())


def _rule_in_scalar_ieee(x, ba, a_log, dt_bias, state, hk, hv, dk, dv):
    """The kernel's order of operations (plugins/gatedDeltaNet/gdnKernel.cuh) in numpy float32,
    every operation one IEEE operation (numpy's float32 sqrt and division are correctly rounded):
    an evaluation independent of torch's CPU kernels. The gates are the reference's."""
    f32, part = np.float32, contract.GDN_STATE_PART
    beta, gamma = (t.numpy() for t in G.gate_inputs(ba, a_log, dt_bias, hv))
    xs, s = x.to(torch.float32).numpy(), state.numpy().astype(f32).copy()
    b, seq = xs.shape[:2]
    rep, sqrt_dk, eps = hv // hk, f32(np.sqrt(np.float64(dk))), f32(contract.GDN_L2NORM_EPS)

    def l2(v, divide):
        ss = np.zeros(v.shape[:2], f32)
        for i in range(dk):
            ss = ss + v[..., i] * v[..., i]
        n = v * (f32(1) / np.sqrt(ss + eps))[..., None]
        return n / sqrt_dk if divide else n

    def parted_dot(a, w):
        sums = []
        for p0 in range(0, dk, part):
            acc = np.zeros((b, hv, dv), f32)
            for i in range(p0, p0 + part):
                acc = acc + a[:, :, i] * w[:, :, i, None]
            sums.append(acc)
        return sums[0] if len(sums) == 1 else sums[0] + sums[1]

    y = np.zeros((b, seq, hv, dv), f32)
    for t in range(seq):
        q = l2(np.repeat(xs[:, t, :hk * dk].reshape(b, hk, dk), rep, axis=1), True)
        k = l2(np.repeat(xs[:, t, hk * dk:2 * hk * dk].reshape(b, hk, dk), rep, axis=1), False)
        v = xs[:, t, 2 * hk * dk:].reshape(b, hv, dv)
        s = s * gamma[:, t, :, None, None]
        delta = (v - parted_dot(s, k)) * beta[:, t, :, None]
        s = s + k[..., None] * delta[:, :, None, :]
        y[:, t] = parted_dot(s, q)
    return y, s


@pytest.mark.parametrize("hk,hv,dk,dv", [(2, 4, 64, 64), (1, 2, 128, 32)])
def test_reference_is_the_kernels_order_in_scalar_ieee(hk, hv, dk, dv):
    """Bitwise against an evaluation in numpy float32 (the CUDA kernel's bits on the H200: same
    counts of differing elements against the earlier reference). Fails with torch's CPU float32
    sqrt in the l2 norm, which is not always correctly rounded (numerics.sqrt_rn)."""
    g = torch.Generator().manual_seed(7)
    x = torch.nn.functional.silu(torch.randn(3, 9, 2 * hk * dk + hv * dv, generator=g))
    ba = torch.randn(3, 9, 2 * hv, generator=g) * 2
    a_log, dt_bias = torch.randn(hv, generator=g), torch.randn(hv, generator=g)
    state = torch.randn(3, hv, dk, dv, generator=g) * 0.5
    y, s = G.gated_delta_rule(x, ba, a_log, dt_bias, state, hk, hv, dk, dv)
    y_ieee, s_ieee = _rule_in_scalar_ieee(x, ba, a_log, dt_bias, state, hk, hv, dk, dv)
    np.testing.assert_array_equal(y.numpy().view(np.int32), y_ieee.view(np.int32))
    np.testing.assert_array_equal(s.numpy().view(np.int32), s_ieee.view(np.int32))
