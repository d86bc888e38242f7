"""The CPU reference of each op against an independent float64 evaluation of docs/ops.md.

The oracle decodes formats with ml_dtypes (FP8 e4m3fn, FP4 e2m1) instead of the project's numerics
module, and computes in float64; inputs are seeded, non-zero, with awkward sizes.
"""

import ml_dtypes
import numpy as np
import pytest
import torch

from metrale_export.ops import tolerances, w4a4, w4a16, w8a8

ROWS = (1, 3, 7, 31)


def bf16(a):
    return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def e4m3(a):
    return np.clip(np.asarray(a, np.float32), -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def e2m1(a):
    return np.clip(np.asarray(a, np.float32), -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)


def codes_of(packed):
    p = packed.view(torch.uint8).numpy().astype(np.int64)
    return np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], -1)


def rel(y, ref):
    return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref))


def fp8_bits_to_f64(bits):
    return bits.view(torch.uint8).numpy().view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def scales_f64(t):
    """bfloat16 group scales as float64, through the bit patterns (ml_dtypes decodes them)."""
    assert t.dtype == torch.bfloat16
    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16).astype(np.float64)


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("group,symmetric,k", [(128, True, 256), (64, False, 256), (32, True, 256),
                                               (128, False, 400), (64, True, 402), (32, False, 98)])
def test_w4a16_matches_float64(m, group, symmetric, k):
    # k = 400, 402, 98: a partial last group (op version 2); 402 is not even a multiple of 4.
    g = torch.Generator().manual_seed(m * 7 + group + k)
    n = 72
    w = torch.randn(n, k, generator=g)
    x = torch.randn(m, k, generator=g) * 3
    q = w4a16.quantize(w, group, symmetric)
    groups = -(-k // group)
    assert q.weight_scale.shape == (n, groups) and q.weight_scale.dtype == torch.bfloat16
    y = w4a16.proj(x, q.weight, q.weight_scale, q.zero_point, None, group).numpy()
    codes = codes_of(q.weight)
    z = 8.0 if q.zero_point is None else np.repeat(q.zero_point.numpy().astype(np.float64), group, 1)[:, :k]
    s = np.repeat(scales_f64(q.weight_scale), group, 1)[:, :k]
    ref = bf16(x.numpy()) @ bf16((codes - z) * s).T
    assert rel(y, ref) < tolerances.OP_FP32["bf16"]
    assert rel(y, x.numpy() @ w.numpy().T) < 0.2  # and it is still the product it quantizes


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("wgran,agran", [("channel", "row"), ("block128", "row_block128"),
                                         ("channel", "row_block128"), ("block128", "row")])
def test_w8a8_fp8_matches_float64(m, wgran, agran):
    g = torch.Generator().manual_seed(m * 11 + len(wgran) + len(agran))
    n, k = 200, 328  # neither a multiple of 128
    w = torch.randn(n, k, generator=g)
    x = torch.randn(m, k, generator=g) * 5
    q = w8a8.quantize(w, wgran)
    y = w8a8.proj(x, q.weight, q.weight_scale, None, wgran, "fp8", agran).numpy()
    xb = bf16(x.numpy())
    nb = -(-k // 128)
    wq = fp8_bits_to_f64(q.weight)
    ref = np.zeros((m, n))
    for b in range(nb):
        ks = slice(b * 128, min(k, (b + 1) * 128))
        span = xb if agran == "row" else xb[:, ks]
        amax = np.abs(span).max(axis=1, keepdims=True).astype(np.float32)
        sx = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
        xq = e4m3(xb[:, ks].astype(np.float32) / sx)
        sw = q.weight_scale.numpy()[:, None] if wgran == "channel" else \
            np.repeat(q.weight_scale.numpy()[:, b], 128)[:n, None]
        ref += (xq @ wq[:, ks].T) * sx.astype(np.float64) * sw.T.astype(np.float64)
    assert rel(y, ref) < tolerances.OP_FP32["fp8"]


@pytest.mark.parametrize("m", ROWS)
def test_w8a8_bf16_activations(m):
    g = torch.Generator().manual_seed(m)
    w, x = torch.randn(96, 256, generator=g), torch.randn(m, 256, generator=g)
    q = w8a8.quantize(w, "block128")
    y = w8a8.proj(x, q.weight, q.weight_scale, None, "block128", "bf16").numpy()
    s = np.repeat(np.repeat(q.weight_scale.numpy(), 128, 0), 128, 1)[:96, :256]
    ref = bf16(x.numpy()) @ bf16(fp8_bits_to_f64(q.weight) * s).T
    assert rel(y, ref) < tolerances.OP_FP32["bf16"]


@pytest.mark.parametrize("m", ROWS)
@pytest.mark.parametrize("static", [False, True])
def test_w4a4_nvfp4_matches_float64(m, static):
    g = torch.Generator().manual_seed(m * 3 + static)
    n, k = 80, 208
    w = torch.randn(n, k, generator=g)
    x = torch.randn(m, k, generator=g) * 2
    q = w4a4.quantize(w)
    input_scale = torch.tensor([float(x.abs().max()) / 2688.0]) if static else None
    y = w4a4.proj(x, q.weight, q.weight_scale, q.weight_global_scale, input_scale, None).numpy()
    wv = codes_of(q.weight)
    wf = e2m1(np.where(wv & 8, -1.0, 1.0) * np.array([0, .5, 1, 1.5, 2, 3, 4, 6])[wv & 7])
    wf = wf * np.repeat(fp8_bits_to_f64(q.weight_scale), 16, 1)
    gw = np.float32(q.weight_global_scale.item())
    xb = bf16(x.numpy()).astype(np.float32)
    if static:
        ga = np.full((m, 1), np.float32(input_scale.item()))
    else:
        amax = np.abs(xb).max(axis=1, keepdims=True)
        ga = np.where(amax > 0, amax / np.float32(2688), np.float32(1)).astype(np.float32)
    blocks = xb.reshape(m, k // 16, 16)
    sa = e4m3(np.abs(blocks).max(axis=2) / (np.float32(6) * ga)).astype(np.float32)
    eff = sa * ga
    xq = e2m1(blocks / np.where(eff == 0, 1, eff)[..., None]) * (eff != 0)[..., None]
    a = (xq * sa[..., None]).reshape(m, k)
    ref = (a @ wf.T) * (ga.astype(np.float32) * gw).astype(np.float64)
    assert rel(y, ref) < tolerances.OP_FP32["nvfp4"]


def test_output_dtype_follows_input():
    w = torch.randn(64, 128)
    q = w4a16.quantize(w)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        y = w4a16.proj(torch.randn(3, 128).to(dt), q.weight, q.weight_scale, None, None, 128)
        assert y.dtype == dt


def test_formats_refuse_activation_formats_outside_the_contract():
    q = w4a16.quantize(torch.randn(8, 128))
    with pytest.raises(ValueError, match="only bf16"):
        w4a16.proj(torch.randn(1, 128), q.weight, q.weight_scale, None, None, 128, "fp8")
    with pytest.raises(ValueError, match="odd"):
        w4a16.quantize(torch.randn(8, 97), 64)
    with pytest.raises(ValueError, match="bfloat16 group scales"):  # a version-1 (float32) scale
        w4a16.proj(torch.randn(1, 128), q.weight, q.weight_scale.float(), None, None, 128)


def test_w4a16_partial_group_statistics_ignore_padding():
    # The last group of K = 160 at group 128 holds 32 values, all in [2, 3]: the quantizer pads it
    # with zeros, which quantize with zero error and change neither the largest magnitude nor the
    # range (that holds 0 anyway), so the group quantizes exactly as its 32 values alone would.
    w = torch.cat((torch.randn(4, 128), 2 + torch.rand(4, 32)), dim=1)
    for symmetric in (True, False):
        q = w4a16.quantize(w, 128, symmetric=symmetric)
        alone = w4a16.quantize(w[:, 128:], 32, symmetric=symmetric)
        assert q.weight_scale.shape == (4, 2) and q.weight_scale.dtype == torch.bfloat16
        assert torch.equal(q.weight_scale[:, 1:], alone.weight_scale)
        assert torch.equal(q.weight[:, 64:], alone.weight)
        if not symmetric:
            assert torch.equal(q.zero_point[:, 1:], alone.zero_point)
        # Nothing is clipped to the padding: the error stays within the search's own clipping
        # (under 2.5 steps for any candidate: 1.5 at d = -9.5, about 1.1 at shrink 0.93).
        d = w4a16.dequantize(q.weight, q.weight_scale, q.zero_point, 128)[:, 128:]
        assert ((d - w[:, 128:]).abs() <= alone.weight_scale.float().abs() * 2.5 + 1e-6).all()


def test_store_scale_rounds_once_to_bf16():
    s = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-9, 3.0e-5], dtype=torch.float32)
    out = w4a16.store_scale(s)
    assert out.dtype == torch.bfloat16
    assert out.float().tolist() == [1.0, 1.0 + 2**-7, float(torch.tensor(3.0e-5).to(torch.bfloat16))]
    # float16 input: widened exactly, then one rounding (the same result as from float32).
    assert torch.equal(w4a16.store_scale(s.half()), w4a16.store_scale(s.half().float()))
