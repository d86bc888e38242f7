"""The float-weight quantizers (ops/w4a16.py quantize): grid use, the scale search, determinism.

The oracle recomputes errors in float64 from the returned codes and scales, and builds its own
round-to-nearest baselines (the full-grid one and the former amax / 7.5 one) and the search's
candidates (documented in ops/w4a16.py) with numpy; torch only rounds a candidate scale to bfloat16.
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


def _codes(q: w4a16.W4A16Weight) -> np.ndarray:
    b = q.weight.view(torch.uint8).numpy().astype(int)
    return np.stack([b & 15, b >> 4], -1).reshape(b.shape[0], -1)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (RNE) -> float64: the scale as W4A16Proj stores it."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16).double().numpy()


@pytest.mark.parametrize("group", w4a16.GROUP_SIZES)
def test_asymmetric_grid_spans_each_group_range_without_search(group):
    # The asymmetric counterpart of the full grid: scale (max - min) / 15 and zero point
    # round(-min / scale), so the group's minimum lands on code 0 and its maximum on code 15 (or 14,
    # when rounding the zero point pulls the grid down by up to half a step), and every element,
    # both ends included, dequantizes within half a step (plus the bf16 rounding of the scale).
    w = _outlier_weight(40, 512, seed=200 + group)
    q = w4a16.quantize(w, group, symmetric=False, search=False)
    g, dg, codes = _groups(w.double().numpy(), group), _groups(_decoded(q), group), _groups(_codes(q), group)
    lo, hi = g.min(-1), g.max(-1)
    assert (lo < 0).all() and (hi > 0).all()  # the range holds 0 on its own: no clamping of the ends
    s = q.weight_scale.double().numpy()
    np.testing.assert_array_equal(s, _bf16((hi.astype(np.float32) - lo.astype(np.float32)) / np.float32(15)))
    z = q.zero_point.numpy().astype(int)
    np.testing.assert_array_equal(z, np.round(-lo / s))
    at_min, at_max = g == lo[..., None], g == hi[..., None]
    assert (codes[at_min] == 0).all()
    top = np.where(at_max, codes, -1).max(-1)
    assert np.isin(top, (14, 15)).all() and (top == 15).mean() > 0.5
    bound = s * (0.5 + 15 * 2.0**-8)  # half a step, and 15 half-ulps of the bf16 scale at the top
    assert (np.abs(dg - g).max(-1) <= bound).all()


def _candidates(g: np.ndarray, symmetric: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """(scale, zero point) per group [N, G] of every candidate the search documents, in float64 from
    float32 group statistics as the quantizer computes them."""
    g32 = g.astype(np.float32)
    hi, lo = g32.max(-1), g32.min(-1)
    out = []
    if symmetric:
        m = np.where(-lo > hi, lo, hi)
        for d in w4a16.SYMMETRIC_DIVISORS:
            s = _bf16(m / np.float32(d))
            out.append((np.where(s == 0, 1.0, s), np.full(s.shape, 8.0)))
        return out
    hi, lo = np.maximum(hi, 0), np.minimum(lo, 0)
    mid, half = (hi + lo) * np.float32(0.5), (hi - lo) * np.float32(0.5)
    for f in w4a16.ASYMMETRIC_SHRINK:
        a, b = (lo, hi) if f == 1.0 else (mid - half * np.float32(f), mid + half * np.float32(f))
        s = _bf16((b - a) / np.float32(15))
        s = np.where(s > 0, s, 1.0)
        out.append((s, np.clip(np.round(-a / s.astype(np.float32)), 0, 15)))
    return out


@pytest.mark.parametrize("group", w4a16.GROUP_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_search_picks_the_best_candidate_of_its_grid(group, symmetric):
    # Every group ends with one of the documented candidates (scale and zero point), the one of least
    # squared error (float64 here, float32 sums in the quantizer: a tie within 1e-6 may go either way).
    w = _outlier_weight(48, 640, seed=300 + group + symmetric)
    q = w4a16.quantize(w, group, symmetric)
    g = _groups(w.double().numpy(), group)
    s = q.weight_scale.double().numpy()
    z = np.full(s.shape, 8.0) if symmetric else q.zero_point.numpy().astype(np.float64)
    cands = _candidates(g, symmetric)
    chosen = np.zeros(s.shape, dtype=int) - 1
    errs = []
    for i, (cs, cz) in enumerate(cands):
        deq = (np.clip(np.round(g / cs[..., None]) + cz[..., None], 0, 15) - cz[..., None]) * cs[..., None]
        errs.append(((deq - g) ** 2).sum(-1))
        chosen = np.where((chosen < 0) & (cs == s) & (cz == z), i, chosen)
    assert (chosen >= 0).all(), "a group's scale and zero point are not one of the search's candidates"
    errs = np.stack(errs)
    np.testing.assert_allclose(((_groups(_decoded(q), group) - g) ** 2).sum(-1),
                               np.take_along_axis(errs, chosen[None], 0)[0], rtol=1e-12)
    assert (np.take_along_axis(errs, chosen[None], 0)[0] <= errs.min(0) * (1 + 1e-6)).all()
    assert len(set(chosen.ravel().tolist())) >= 2  # the search is not round to nearest on this weight


@pytest.mark.parametrize("group", w4a16.GROUP_SIZES)
@pytest.mark.parametrize("symmetric", [True, False])
def test_search_lowers_the_error_against_round_to_nearest(group, symmetric):
    w = _outlier_weight(96, 1024, seed=7 * group + symmetric)
    wf = w.double().numpy()
    err = {s: np.linalg.norm(wf - _decoded(w4a16.quantize(w, group, symmetric, search=s))) / np.linalg.norm(wf)
           for s in (False, True)}
    assert err[True] < 0.995 * err[False]
    full_grid = np.linalg.norm(wf - _rtn_full_grid(wf, group)) / np.linalg.norm(wf)
    if symmetric:
        assert full_grid == pytest.approx(err[False], rel=1e-6)
        former = np.linalg.norm(wf - _rtn_former(wf, group)) / np.linalg.norm(wf)
        assert err[False] < 0.97 * former  # the full grid alone: every step 1/16 finer
    else:  # the export's default: zero points beat the best symmetric grid by far on these weights
        assert err[True] < 0.85 * full_grid


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
