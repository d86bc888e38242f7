"""GPU tests of the grouped W4A16 and W4A4 ops on the wgmma tier (moeWgmmaKernel, moeWgmmaRegsKernel,
plugins/moeProj/moeProjKernel.cuh).

Past m = 128 tokens the grouped W4A16 launch runs the dense kernels' wgmma tier on persistent CTAs
(W4A4: its register path, one CTA a tile) over a schedule of 64- or 128-token tiles that start on the operand's 8-row groups, so a tile may
hold the previous expert's last rows (computed, never stored). METRALE_MOE_WGMMA (read at each call)
"0" keeps the shared-memory tier, "64" / "128" force the token tile. Checked here, with many experts
(so most expert boundaries are not 8-aligned), uniform and Zipf-skewed routing (one expert holding
thousands of rows), repeated and bad ids, combine 0 and 1:
- every tile choice is bitwise the shared-memory tier (combine=0 and combine=1);
- combine=0 is bitwise the dense kernel of each (row, slot)'s expert on that row;
- a row's bits do not depend on the batch: a token alone (the slot path) vs at the end of a batch
  of 4096 served by the wgmma tier.
Skipped where the device has no sm_90a code (the tier is not used there).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_moe_kernels import Experts  # noqa: E402
from test_proj_kernels import DEV, _inputs  # noqa: E402

from metrale_export.ops import cuda as mcuda  # noqa: E402,F401  (registers the CUDA kernels)

if torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("the wgmma tier runs on sm_90a only", allow_module_level=True)

E, TOP_K = 40, 6
CASES = [
    ("w4a16", dict(group_size=128, symmetric=True, bias=True), 200, 1152),
    ("w4a16", dict(group_size=128, symmetric=False, bias=False), 96, 800),  # a partial last group, K % 128 != 0
    ("w4a16", dict(group_size=32, symmetric=False, bias=True), 264, 512),
    ("w4a4", dict(act="nvfp4", input_scale=False, bias=True), 200, 1088),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=False), 136, 1024),  # a static input_scale per expert
    ("w4a4", dict(act="bf16", input_scale=False, bias=False), 136, 800),
]
TILES = ("64", "128", None)  # None: the default choice


def _id(c):
    op, o, n, k = c
    if op == "w4a16":
        return f"w4a16-g{o['group_size']}-{'sym' if o['symmetric'] else 'asym'}-n{n}-k{k}"
    return f"w4a4-{o['act']}{'-static' if o['input_scale'] else ''}-n{n}-k{k}"


def _routing(m, seed, skew):
    g = torch.Generator().manual_seed(seed)
    if skew:
        probs = 1.0 / torch.arange(1, E + 1, dtype=torch.float64) ** 1.3
        ids = torch.stack([torch.multinomial(probs, TOP_K, replacement=False, generator=g) for _ in range(m)])
        ids = ids[:, torch.randperm(TOP_K, generator=g)]
    else:
        ids = torch.stack([torch.randperm(E, generator=g)[:TOP_K] for _ in range(m)])
    ids = ids.to(torch.int32)
    if m > 3:
        ids[1, 2] = ids[1, 0]  # a repeated id: its second slot is skipped
        ids[2, 1] = E + 3      # a bad id: skipped
        ids[3, 4] = -1
    w = torch.rand(m, TOP_K, generator=g) + 0.1
    return ids, w


def _with(monkeypatch, tile, fn):
    if tile is None:
        monkeypatch.delenv("METRALE_MOE_WGMMA", raising=False)
    else:
        monkeypatch.setenv("METRALE_MOE_WGMMA", tile)
    out = fn()
    torch.cuda.synchronize()
    return out


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_wgmma_tier_is_the_shared_memory_tier_and_the_dense_kernel_bitwise(case, monkeypatch):
    ex = Experts(case, experts=E, top_k=TOP_K)
    fails = []
    for m, skew in ((129, False), (300, True), (1000, False), (3000, True)):
        x = _inputs(m, ex.k, torch.bfloat16, seed=m).to(DEV)
        ids, w = _routing(m, seed=m + 1, skew=skew)
        ids, w = ids.to(DEV), w.to(torch.bfloat16).to(DEV)
        xs = _inputs(m * TOP_K, ex.k, torch.bfloat16, seed=m + 2).to(DEV).reshape(m, TOP_K, ex.k)
        ref0 = _with(monkeypatch, "0", lambda: ex.grouped(x, ids))
        ref1 = _with(monkeypatch, "0", lambda: ex.grouped(xs, ids, w))
        for tile in TILES:
            y0 = _with(monkeypatch, tile, lambda: ex.grouped(x, ids))
            y1 = _with(monkeypatch, tile, lambda: ex.grouped(xs, ids, w))
            if not torch.equal(y0, ref0):
                bad = (y0 != ref0).any(-1).nonzero()[:4].tolist()
                fails.append(f"m={m} skew={skew} tile={tile}: combine=0 differs, (row, slot) {bad}")
            if not torch.equal(y1, ref1):
                fails.append(f"m={m} skew={skew} tile={tile}: combine=1 differs")
        # combine=0 against the dense kernel of each slot's expert (valid slots only)
        y0 = _with(monkeypatch, None, lambda: ex.grouped(x, ids))
        for e in range(E):
            sel = ids == e
            first = torch.ones_like(sel)
            first[1, 2] = ids[1, 2] != ids[1, 0]
            sel = sel & first
            if sel.any():
                rows = x[:, None, :].expand(m, TOP_K, ex.k)[sel].contiguous()
                if not torch.equal(y0[sel], ex.layers[e].run(rows)):
                    fails.append(f"m={m} skew={skew}: expert {e} differs from the dense kernel")
    assert not fails, "\n".join(fails)


@pytest.mark.parametrize("case", [CASES[0], CASES[3]], ids=_id)
def test_a_row_alone_and_at_the_end_of_a_large_batch_bitwise(case, monkeypatch):
    ex = Experts(case, seed=7, experts=E, top_k=TOP_K)
    token = _inputs(1, ex.k, torch.bfloat16, seed=5).to(DEV)
    tid = torch.tensor([[0, 5, 9, 17, 33, 39]], dtype=torch.int32, device=DEV)
    alone = _with(monkeypatch, None, lambda: ex.grouped(token, tid))
    for m, skew in ((4096, False), (4096, True)):
        x = _inputs(m, ex.k, torch.bfloat16, seed=11).to(DEV)
        ids, _ = _routing(m, seed=12, skew=skew)
        ids = ids.to(DEV)
        x[m - 1] = token[0]
        ids[m - 1] = tid[0]
        for tile in TILES:
            y = _with(monkeypatch, tile, lambda: ex.grouped(x, ids))
            assert torch.equal(y[m - 1], alone[0]), f"m={m} skew={skew} tile={tile}: the last row's bits differ"
