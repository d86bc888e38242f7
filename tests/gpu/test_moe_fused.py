"""GPU tests of the fused decode path of the grouped-expert ops (plugins/moeProj/moeFusedKernel.cuh,
``METRALE_MOE_FUSED=1``; W4A16 so far).

- bitwise the path it replaces: for every m it serves (1..64), combine 0 and 1, x in bfloat16 and
  float32, with and without zero points and bias, uniform and Zipf-skewed routing over 128 experts
  (top-8; a hot expert takes most rows) and bad or repeated ids, the fused launch's output equals the
  slot / sorted path's bit for bit (that path is bitwise the dense kernel per expert,
  tests/gpu/test_moe_kernels.py; with METRALE_MOE_FUSED=1 set for a whole run that module checks the
  fused path against the dense kernel directly);
- row invariance with skewed routing: a token's gate / up / down outputs alone equal its outputs in
  batches of 2..64 whose other tokens all route to the token's own experts or to one hot expert.
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from metrale_export.ops import cuda as mcuda  # noqa: E402,F401  (registers the CUDA kernels)

DEV = "cuda"
E, TOP_K = 128, 8
M_VALUES = (1, 2, 3, 4, 7, 8, 9, 16, 33, 64)


def _fused(mode: int):
    """METRALE_MOE_FUSED: 0 the slot / sorted paths, 1 the fused launch (combine=1 then the combine
    kernel), 2 the fused launch with the combine folded in."""
    if mode:
        os.environ["METRALE_MOE_FUSED"] = str(mode)
    else:
        os.environ.pop("METRALE_MOE_FUSED", None)


class W4A16Experts:
    """E random W4A16 experts (random codes, scales and zero points: bitwise comparisons only)."""

    def __init__(self, n: int, k: int, group: int, zero_point: bool, bias: bool, seed: int):
        g = torch.Generator(device=DEV).manual_seed(seed)
        self.n, self.k, self.group = n, k, group
        groups = (k + group - 1) // group
        self.weight = torch.randint(-128, 128, (E, n, k // 2), device=DEV, generator=g, dtype=torch.int8)
        self.scale = (torch.rand(E, n, groups, device=DEV, generator=g) * 0.02 + 1e-3).to(torch.bfloat16)
        self.zp = torch.randint(0, 16, (E, n, groups), device=DEV, generator=g, dtype=torch.int8) if zero_point else None
        self.bias = torch.randn(E, n, device=DEV, generator=g) if bias else None

    def __call__(self, x, ids, w=None):
        return torch.ops.metrale.w4a16_moe_proj(x, ids, w, self.weight, self.scale, self.zp, self.bias, self.n, self.k,
                                                E, TOP_K, int(w is not None), self.group, "bf16", "moe", "t")


def _routing(m: int, kind: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        p = torch.ones(E)
    else:  # Zipf s = 1.2 over a random expert order: a few experts take most rows
        p = (1.0 / torch.arange(1, E + 1, dtype=torch.float64) ** 1.2)[torch.randperm(E, generator=g)]
    ids = torch.multinomial(p.expand(m, E).float(), TOP_K, replacement=False, generator=g).to(torch.int32)
    if kind == "bad" and m >= 2:
        ids[0, 1] = ids[0, 0]  # a repeated id
        ids[1, 2] = E + 3      # out of range
        ids[m - 1, 0] = -1
    return ids


CASES = [(768, 2048, 128, False, False), (200, 1152, 128, True, True), (96, 800, 32, True, False),
         (2048, 768, 128, False, True)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[0]}-k{c[1]}-g{c[2]}-zp{int(c[3])}-b{int(c[4])}")
def test_fused_is_bitwise_the_slot_and_sorted_paths(case):
    ex = W4A16Experts(*case, seed=case[0])
    fails = []
    try:
        for m in M_VALUES:
            for kind in ("uniform", "zipf", "bad"):
                for dtype in (torch.bfloat16, torch.float32):
                    ids = _routing(m, kind, seed=m * 7 + len(kind)).to(DEV)
                    g = torch.Generator(device=DEV).manual_seed(m)
                    x = torch.randn(m, ex.k, device=DEV, generator=g).to(dtype)
                    xs = torch.randn(m, TOP_K, ex.k, device=DEV, generator=g).to(dtype)
                    w = (torch.rand(m, TOP_K, device=DEV, generator=g) + 0.1).to(dtype)
                    outs = []
                    for mode in (0, 1, 2):
                        _fused(mode)
                        outs.append((ex(x, ids), ex(xs, ids, w)))
                    for mode in (1, 2):
                        for comb in (0, 1):
                            if not torch.equal(outs[0][comb], outs[mode][comb]):
                                fails.append(f"m={m} {kind} {dtype}: fused {mode} combine={comb} differs")
    finally:
        _fused(0)
    assert not fails, "\n".join(fails)


def test_fused_row_invariance_with_skewed_routing():
    """Token 0 alone vs in batches whose other rows pile onto its experts or one hot expert."""
    h, inter = 1024, 384
    gate = W4A16Experts(inter, h, 128, False, False, seed=1)
    up = W4A16Experts(inter, h, 128, True, False, seed=2)
    down = W4A16Experts(h, inter, 128, False, True, seed=3)
    g = torch.Generator(device=DEV).manual_seed(11)
    token = torch.randn(1, h, device=DEV, generator=g).to(torch.bfloat16)
    tid = _routing(1, "zipf", seed=5).to(DEV)
    tw = torch.rand(1, TOP_K, device=DEV, generator=g).to(torch.bfloat16)

    def block(x, ids, w):
        a, b = gate(x, ids), up(x, ids)
        act = (torch.nn.functional.silu(a.float()) * b.float()).to(torch.bfloat16)
        return a, b, down(act, ids, w)

    bad = []
    for mode in (1, 2):
        _fused(mode)
        try:
            bad += _invariance_cases(block, token, tid, tw, g, h, mode)
        finally:
            _fused(0)
    assert not bad, f"token bits differ in batches of (fused mode, m) {bad}"


def _invariance_cases(block, token, tid, tw, g, h, mode):
    """(mode, m) of the batches where the token's bits differ from its bits alone (and "alone" when
    those differ from the default path's)."""
    alone = block(token, tid, tw)
    _fused(0)
    ref = block(token, tid, tw)
    _fused(mode)
    bad = [] if all(torch.equal(a, r) for a, r in zip(alone, ref)) else [(mode, "alone")]
    for m in range(2, 65):
        x = torch.randn(m, h, device=DEV, generator=g).to(torch.bfloat16)
        ids = _routing(m, "zipf", seed=100 + m).to(DEV)
        if m % 2:  # every other batch: all rows on the token's own experts (its tiles fill up)
            ids[:] = tid[0][torch.randperm(TOP_K, device=DEV)]
        w = torch.rand(m, TOP_K, device=DEV, generator=g).to(torch.bfloat16)
        pos = int(torch.randint(0, m, (1,), generator=torch.Generator().manual_seed(m)))
        x[pos], ids[pos], w[pos] = token[0], tid[0], tw[0]
        out = block(x, ids, w)
        if not all(torch.equal(o[pos], a[0]) for o, a in zip(out, alone)):
            bad.append((mode, m))
    return bad
