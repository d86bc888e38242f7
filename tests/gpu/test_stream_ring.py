"""GPU tests of the ring variant of the weight-streaming tier (METRALE_STREAM=ring; plugins/common/
projStreamRing.cuh; METRALE_STREAM="" the register ring): at every M <= 16 it gives the same bits as
the register-ring tier (projStreamTile), so the same bits as the wgmma tier gives a row at larger M (test_proj_kernels.py's
row-invariance test, which device_run.sh's `decode` mode also runs under METRALE_STREAM=ring), and
stays within the float64 evaluation's tolerance (outputs NaN-poisoned: every element written).

Shapes: K a multiple of 128 (the ring serves only those; others fall back to projStreamTile, checked
too), odd N (a partial last CTA), 2, 3, 4 and 8 slices with a partial last group of stages, zero points
and groups of 32, 64, 128.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_proj_kernels import DEV, Layer, _inputs, _rel, _tolerance  # noqa: E402

ENV = "METRALE_STREAM"
RINGS = ("ring",)  # ringx (the activations staged too) measured slower and removed: in git at fbd70be
CASES = [
    (dict(group_size=128, symmetric=True, bias=True), 200, 1152),      # 8 slices, nkb 9: last group 1 of 8
    (dict(group_size=32, symmetric=False, bias=False), 197, 1280),     # zero points, group 32
    (dict(group_size=64, symmetric=False, bias=True), 4104, 384),      # 3 slices (nkb 3), 2 tiles a CTA
    (dict(group_size=128, symmetric=False, bias=False), 16400, 640),   # 2 slices, uneven 3 + 2
    (dict(group_size=64, symmetric=True, bias=True), 8200, 1024),      # 4 slices
    (dict(group_size=128, symmetric=True, bias=False), 4096, 12288),   # 8B-down
    (dict(group_size=128, symmetric=True, bias=False, negative_scales=True), 520, 2048),
    (dict(group_size=64, symmetric=False, bias=True), 300, 1056),      # K % 128 != 0: the fallback
]


def _id(c):
    o, n, k = c
    return "-".join(f"{v}" for key, v in o.items() if key != "bias") + f"-n{n}-k{k}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_ring_gives_the_register_ring_bits(case, monkeypatch):
    o, n, k = case
    layer = Layer("w4a16", o, n, k, seed=13)
    x = _inputs(16, k, torch.bfloat16, seed=17).to(DEV)
    bad = []
    for m in range(1, 17):
        xm = x[:m].contiguous()
        out = {}
        for variant in ("", *RINGS):
            monkeypatch.setenv(ENV, variant)
            out[variant] = layer.run(xm)
        ref = layer.float64_reference(xm.cpu())
        for v in RINGS:
            a, b = out[""].view(torch.int16), out[v].view(torch.int16)
            if not torch.equal(a, b):
                bad.append(f"m={m}: {(a != b).sum().item()} elements differ between {v} and the register ring")
            err = _rel(out[v], ref)
            if not err <= _tolerance(layer.fmt, xm.dtype):
                bad.append(f"m={m}: {v} error {err:.3g} against float64")
    assert not bad, f"{_id(case)}:\n" + "\n".join(bad)


def test_ring_reuses_its_stages_at_two_slices(monkeypatch):
    """2 slices and 4 tiles a CTA over 20 stages each (the ring of 8 wraps): the shape class of 32B-up
    (N 25600, K 5120), where benchmarks/bench_decode_variants.py saw the ring's bits differ at M = 8
    (fd9ee50, e28ca9b) while the release could overtake the stage's read. Bitwise the register ring at
    M = 1..16, several launches each (a race shows in some launches only)."""
    layer = Layer("w4a16", dict(group_size=128, symmetric=True, bias=False), 16384, 5120, seed=31)
    x = _inputs(16, 5120, torch.bfloat16, seed=32).to(DEV)
    bad = []
    for m in range(1, 17):
        xm = x[:m].contiguous()
        monkeypatch.setenv(ENV, "")
        want = layer.run(xm).view(torch.int16)
        for v in RINGS:
            monkeypatch.setenv(ENV, v)
            for rep in range(4):
                got = layer.run(xm).view(torch.int16)
                if not torch.equal(got, want):
                    bad.append(f"m={m} {v} launch {rep}: {(got != want).sum().item()} elements differ")
    assert not bad, "\n".join(bad)


def test_ring_rows_equal_the_wgmma_tier_rows(monkeypatch):
    """A row through the ring (M <= 16) equals the same row inside a 4096-row launch (the wgmma tier)."""
    layer = Layer("w4a16", dict(group_size=128, symmetric=False, bias=True), 1000, 2048, seed=21)
    x = _inputs(4096, 2048, torch.bfloat16, seed=22).to(DEV)
    big = layer.run(x)
    bad = []
    for v in RINGS:
        monkeypatch.setenv(ENV, v)
        bad += [(v, m) for m in (1, 5, 8, 9, 16) if not torch.equal(layer.run(x[:m].contiguous()).view(torch.int16),
                                                                     big[:m].view(torch.int16))]
    assert not bad, f"(variant, M) = {bad}: ring rows differ from the same rows of the 4096-row launch"
