"""The float-weight quantizers (ops/w4a16.py quantize): grid use, the scale search, determinism.

The oracle recomputes errors in float64 from the returned codes and scales, and builds its own
round-to-nearest baselines (the full-grid one and the former amax / 7.5 one) with numpy.
"""

import numpy as np
import pytest
import torch

from metrale_export.ops import w4a16


def _outlier_weight(n: int, k: int, seed: int, dtype=torch.bfloat16) -> torch.Tensor:
    """Gaussian weights with a few input channels x10 (as in benchmarks/bench_export.py)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) * 0.02
    w[:, torch.randperm(k, generator=g)[: max(1, k // 64)]] *= 10
    return w.to(dtype)


def _groups(a: np.ndarray, group: int) -> np.ndarray:
    return a.reshape(a.shape[0], -1, group)


def _decoded(q: w4a16.W4A16Weight) -> np.ndarray:
    return w4a16.dequantize(q.weight, q.weight_scale, q.zero_point, q.group_size).double().numpy()


def _group_sq_error(w: np.ndarray, d: np.ndarray, group: int) -> np.ndarray:
    return (_groups(w - d, group) ** 2).sum(-1)


def _rtn_full_grid(w: np.ndarray, group: int) -> np.ndarray:
    """Round to nearest with scale m / -8 (m the signed largest-magnitude value, the positive one on
    a tie), in float64."""
    g = _groups(w, group)
    hi, lo = g.max(-1, keepdims=True), g.min(-1, keepdims=True)
    m = np.where(-lo > hi, lo, hi)
    s = np.where(m == 0, 1.0, m / -8.0)
    return (np.clip(np.round(g / s), -8, 7) * s).reshape(w.shape)


def _rtn_former(w: np.ndarray, group: int) -> np.ndarray:
    """The quantizer before issue 15: scale amax / 7.5, codes -8..7 (the -8 code never used)."""
    g = _groups(w, group)
    s = np.abs(g).max(-1, keepdims=True) / 7.5
    s = np.where(s == 0, 1.0, s)
    return (np.clip(np.round(g / s), -8, 7) * s).reshape(w.shape)


@pytest.mark.parametrize("group", w4a16.GROUP_SIZES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_largest_magnitude_element_is_exact_without_search(group, dtype):
    w = _outlier_weight(40, 512, seed=group, dtype=dtype)
    q = w4a16.quantize(w, group, search=False)
    wf, d = w.double().numpy(), _decoded(q)
    g, dg = _groups(wf, group), _groups(d, group)
    amax = np.abs(g).max(-1, keepdims=True)
    at_max = np.abs(g) == amax
    # The code range is [-8, 7]: some largest-magnitude element sits on code 0 (-8 x scale).
    codes = _groups(np.stack([(b := q.weight.view(torch.uint8).numpy().astype(int)) & 15, b >> 4], -1)
                    .reshape(w.shape), group)
    assert ((codes == 0) & at_max).any(-1).all()
    if dtype == torch.bfloat16:  # m / 8 is exact in the stored scale: m dequantizes exactly
        assert ((dg == g) & at_max).any(-1).all()
    else:  # float32 weights: m to the stored scale's precision
        tol = amax * (2.0**-24 if w4a16.SCALE_DTYPE == torch.float32 else 2.0**-8)  # half a bf16 ulp
        assert ((np.abs(dg - g) <= tol) & at_max).any(-1).all()


@pytest.mark.parametrize("group", w4a16.GROUP_SIZES)
def test_search_keeps_the_largest_element_exact_unless_clipping_is_strictly_better(group):
    w = _outlier_weight(64, 768, seed=100 + group)
    wf = w.double().numpy()
    rtn = _rtn_full_grid(wf, group)
    d = _decoded(w4a16.quantize(w, group))
    g, dg = _groups(wf, group), _groups(d, group)
    exact = ((dg == g) & (np.abs(g) == np.abs(g).max(-1, keepdims=True))).any(-1)
    e_search, e_rtn = _group_sq_error(wf, d, group), _group_sq_error(wf, rtn, group)
    assert (exact | (e_search < e_rtn)).all()
    assert (e_search <= e_rtn * (1 + 1e-6)).all()  # never worse than round to nearest (float32 sums)
    assert (~exact).any() and exact.any()  # both happen on this weight: the test can tell them apart


@pytest.mark.parametrize("group", w4a16.GROUP_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_search_lowers_the_error_against_round_to_nearest(group, symmetric):
    w = _outlier_weight(96, 1024, seed=7 * group + symmetric)
    wf = w.double().numpy()
    err = {s: np.linalg.norm(wf - _decoded(w4a16.quantize(w, group, symmetric, search=s))) / np.linalg.norm(wf)
           for s in (False, True)}
    assert err[True] < 0.995 * err[False]
    if symmetric:
        assert np.linalg.norm(wf - _rtn_full_grid(wf, group)) / np.linalg.norm(wf) == pytest.approx(err[False], rel=1e-6)
        former = np.linalg.norm(wf - _rtn_former(wf, group)) / np.linalg.norm(wf)
        assert err[False] < 0.97 * former  # the full grid alone: every step 1/16 finer


def test_asymmetric_zero_points_and_all_zero_groups():
    w = _outlier_weight(8, 256, seed=3).float()
    w[0, :32] = 0.0
    w[1, 32:64] = 0.25  # a constant group
    for symmetric in (True, False):
        q = w4a16.quantize(w, 32, symmetric)
        d = _decoded(q)
        # 0.25 on a bf16 scale: exact symmetric (0.25 / -8), within half a bf16 ulp asymmetric (0.25 / 15)
        assert np.all(d[0, :32] == 0) and np.allclose(d[1, 32:64], 0.25, rtol=2.0**-8, atol=0)
        assert torch.isfinite(q.weight_scale).all() and (q.weight_scale != 0).all()
        if not symmetric:
            assert int(q.zero_point.min()) >= 0 and int(q.zero_point.max()) <= 15


@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_is_deterministic_and_chunking_does_not_change_bytes(monkeypatch, symmetric):
    w = _outlier_weight(300, 512, seed=11)
    a = w4a16.quantize(w, 32, symmetric)
    b = w4a16.quantize(w.clone(), 32, symmetric)
    monkeypatch.setattr(w4a16, "_CHUNK_ELEMENTS", 512 * 7)  # chunks of 7 rows, the last one short
    c = w4a16.quantize(w, 32, symmetric)
    for x, y in ((a, b), (a, c)):
        assert torch.equal(x.weight, y.weight) and torch.equal(x.weight_scale, y.weight_scale)
        assert (x.zero_point is None) == symmetric and (symmetric or torch.equal(x.zero_point, y.zero_point))


def test_nvfp4_block_scale_search_lowers_the_error_and_stays_next_to_round_to_nearest():
    from metrale_export.ops import w4a4

    w = _outlier_weight(64, 512, seed=21).float()
    wf = w.double().numpy()
    q = {s: w4a4.quantize(w, search=s) for s in (False, True)}
    err = {s: np.linalg.norm(wf - w4a4.dequantize(v.weight, v.weight_scale, v.weight_global_scale).double().numpy())
           for s, v in q.items()}
    assert err[True] < 0.97 * err[False]
    assert torch.equal(q[True].weight_global_scale, q[False].weight_global_scale)
    step = (q[True].weight_scale.to(torch.int16) - q[False].weight_scale.to(torch.int16)).abs()
    assert int(step.max()) == 1 and bool((step == 0).any())  # a neighbour of the RNE scale, or it
    again = w4a4.quantize(w.clone())
    assert torch.equal(again.weight, q[True].weight) and torch.equal(again.weight_scale, q[True].weight_scale)
