"""GPU tests of the grouped W8A8 projection on the FP8 wgmma kernel (plugins/moeProj/moeFp8Kernel.cuh,
``METRALE_MOE_FP8=1``: a measurement variant; W8A8MoEProj is version 2 without it).

- per expert, bitwise W8A8Proj version 3's dense kernel (the FP8 wgmma default): every (row, slot)
  routed to expert e equals the dense op of e on that row (combine=0), and the combine equals
  docs/ops.md's float32 sum of those dense outputs in ascending expert id (combine=1), into
  NaN-poisoned outputs; m = 1..3000 (every token tile 8..128, and each forced by
  METRALE_MOE_FP8_TILE), 40 experts top-6 under uniform and Zipf routing, x in float32 and bf16,
  partial last weight tiles (N not a multiple of 128: a box reads the next expert's rows);
- the block-scaled variants alike (block128 weights and / or row_block128 activations, each block
  scaled at its promotion as the dense kernel does);
- within docs/ops.md's FP8 tensor-core bound of a float64 evaluation;
- a bad and a repeated id are skipped;
- a row alone equals the same row as the last of 4096.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_moe_kernels import Experts  # noqa: E402
from test_proj_kernels import DEV, _inputs, _rel, _tolerance  # noqa: E402

from metrale_export.ops.moe import combine as ref_combine  # noqa: E402

E, TOP_K = 40, 6
CASES = [("w8a8", dict(gran="channel", act="fp8", agran="row", bias=True), 200, 1040),
         ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False), 96, 2048),
         ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=True), 384, 272),
         # the block-scaled variants (the official FP8 Qwen3 checkpoints: block128 x row_block128)
         ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False), 256, 1152),
         ("w8a8", dict(gran="block128", act="fp8", agran="row", bias=True), 200, 1040),
         ("w8a8", dict(gran="channel", act="fp8", agran="row_block128", bias=False), 384, 272)]
M_VALUES = (1, 2, 5, 16, 33, 64, 129, 700, 3000)


@pytest.fixture(autouse=True)
def fp8_tier(monkeypatch):
    monkeypatch.setenv("METRALE_MOE_FP8", "1")
    monkeypatch.delenv("METRALE_W8A8_MMA", raising=False)  # the dense default: the FP8 wgmma kernel
    monkeypatch.delenv("METRALE_MOE_FP8_TILE", raising=False)


def _id(c):
    return f"{c[1]['gran']}-{c[1]['agran']}-n{c[2]}-k{c[3]}-bias{int(c[1]['bias'])}"


def _routing(m, kind, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        p = torch.ones(E)
    else:  # Zipf s = 1.2 over a random expert order: a few experts take most rows
        p = (1.0 / torch.arange(1, E + 1, dtype=torch.float64) ** 1.2)[torch.randperm(E, generator=g)].float()
    ids = torch.multinomial(p.expand(m, E), TOP_K, replacement=False, generator=g).to(torch.int32)
    w = torch.rand(m, TOP_K, generator=g) + 0.1
    return ids, w


def _dense_per_slot(ex, x, ids):
    """[m, top_k, n]: the dense kernel of each slot's expert on its row (NaN where a slot is skipped)."""
    m = ids.shape[0]
    out = torch.full((m, TOP_K, ex.n), float("nan"), dtype=x.dtype, device=DEV)
    rows = x if x.dim() == 3 else x[:, None, :].expand(m, TOP_K, ex.k)
    for e in range(E):
        sel = ids == e
        if sel.any():
            out[sel] = ex.layers[e].run(rows[sel].contiguous())
    return out


@pytest.mark.parametrize("kind", ["uniform", "zipf"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_each_expert_is_the_dense_fp8_kernel_bitwise(case, kind):
    ex = Experts(case, experts=E, top_k=TOP_K)
    fails = []
    for m in M_VALUES:
        for dtype in (torch.float32, torch.bfloat16):
            x = _inputs(m, ex.k, dtype, seed=m).to(DEV)
            ids, w = _routing(m, kind, seed=m + 1)
            ids, w = ids.to(DEV), w.to(dtype).to(DEV)
            y = ex.grouped(x, ids)
            want = _dense_per_slot(ex, x, ids)
            if not torch.equal(y, want):
                bad = (y != want).any(dim=-1).nonzero()[:4].tolist()
                fails.append(f"m={m} {dtype}: combine=0 differs from the dense FP8 kernel at (row, slot) {bad}")
            if dtype == torch.bfloat16 and m in (33, 700):
                for e in range(0, E, 7):
                    sel = ids == e
                    if sel.any():
                        rows = x[:, None, :].expand(m, TOP_K, ex.k)[sel].contiguous()
                        err = _rel(y[sel], ex.layers[e].float64_reference(rows.cpu()))
                        tol = _tolerance(ex.layers[e].fmt, dtype)
                        if err > tol:
                            fails.append(f"m={m} expert {e}: vs float64 {err:.3g} (tol {tol:g})")
            xs = _inputs(m * TOP_K, ex.k, dtype, seed=m + 2).to(DEV).reshape(m, TOP_K, ex.k)
            yc = ex.grouped(xs, ids, w)
            per = _dense_per_slot(ex, xs, ids)
            want_c = ref_combine(per.cpu(), ids.cpu(), w.cpu(), dtype).to(DEV)
            if not torch.equal(yc, want_c):
                fails.append(f"m={m} {dtype}: combine=1 differs from docs/ops.md's sum of the dense outputs")
    assert not fails, "\n".join(fails)


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=_id)
@pytest.mark.parametrize("tile", ["8", "16", "32", "64", "128"])
def test_every_token_tile_gives_the_same_bits(monkeypatch, tile, case):
    ex = Experts(case, experts=E, top_k=TOP_K)
    x = _inputs(300, ex.k, torch.bfloat16, seed=3).to(DEV)
    ids, _ = _routing(300, "zipf", seed=4)
    ids = ids.to(DEV)
    want = _dense_per_slot(ex, x, ids)
    monkeypatch.setenv("METRALE_MOE_FP8_TILE", tile)
    assert torch.equal(ex.grouped(x, ids), want)


def test_bad_and_repeated_ids_are_skipped():
    ex = Experts(CASES[0], experts=E, top_k=TOP_K)
    m = 40
    x = _inputs(m, ex.k, torch.bfloat16, seed=5).to(DEV)
    ids, w = _routing(m, "uniform", seed=6)
    ids[0, 1] = ids[0, 0]  # repeated: the second is skipped
    ids[1, 2] = E + 3      # out of range
    ids[m - 1, 0] = -1
    ids, w = ids.to(DEV), w.to(torch.bfloat16).to(DEV)
    y = ex.grouped(x, ids)
    ok = (ids >= 0) & (ids < E)
    ok[0, 1] = False
    want = _dense_per_slot(ex, x, torch.where(ok, ids, torch.full_like(ids, -1)))
    assert torch.equal(y[ok], want[ok])
    assert torch.isfinite(ex.grouped(x[:, None, :].expand(m, TOP_K, ex.k).contiguous(), ids, w).float()).all()


def test_row_alone_equals_last_row_of_a_large_batch():
    ex = Experts(CASES[1], experts=E, top_k=TOP_K)
    x = _inputs(4096, ex.k, torch.bfloat16, seed=8).to(DEV)
    ids, w = _routing(4096, "zipf", seed=9)
    ids, w = ids.to(DEV), w.to(torch.bfloat16).to(DEV)
    big = ex.grouped(x[:, None, :].expand(4096, TOP_K, ex.k).contiguous(), ids, w)
    alone = ex.grouped(x[-1:, None, :].expand(1, TOP_K, ex.k).contiguous(), ids[-1:], w[-1:])
    assert torch.equal(big[-1:], alone)
