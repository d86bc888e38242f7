"""GPU tests of the Gated DeltaNet kernels (plugins/gatedDeltaNet) through metrale_export.ops.cuda:

- against the CPU reference (ops/gdn.py, the same order of operations; exp/log1p in float64 on
  both sides, the square root correctly rounded on both): bitwise, the conv and the rule, every
  output and state (the number of differing elements is printed, and the bound
  tolerances.OP_NON_PROJECTION checked first, so a failure says how far off it is);
- bitwise batch invariance: a sequence alone vs inside batches of 2..64;
- bitwise chunking invariance: one call over S tokens vs chunks of 1, 7 and 64 vs token by token,
  the states carried;
- run to run: two launches give the same bits.
Qwen3-Next's shapes (dk = dv = 128, 16 key heads, 32 value heads) and the hybrid demo's (dk = 64).
Skipped, with the reason, where no CUDA device is present.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from metrale_export.ops import cuda as mcuda  # noqa: E402, F401  (registers the CUDA kernels)
from metrale_export.ops import gdn as G  # noqa: E402
from metrale_export.ops import tolerances  # noqa: E402

DEV = torch.device("cuda")
SHAPES = {"next80b": (16, 32, 128, 128, 4), "demo": (2, 4, 64, 64, 4)}
DTYPES = (torch.bfloat16, torch.float32, torch.float16)


def _case(shape, b, s, dtype, seed):
    hk, hv, dk, dv, k = SHAPES[shape]
    c = 2 * hk * dk + hv * dv
    g = torch.Generator().manual_seed(seed)
    w = (torch.randn(c, 1, k, generator=g) * 0.3).to(dtype)
    a_log, dt_bias = torch.randn(hv, generator=g).to(dtype), torch.randn(hv, generator=g).to(dtype)
    x = torch.randn(b, s, c, generator=g).to(dtype)
    cs = torch.randn(b, c, k - 1, generator=g).to(dtype)
    ba = (torch.randn(b, s, 2 * hv, generator=g) * 2).to(dtype)
    st = torch.randn(b, hv, dk, dv, generator=g) * 0.5
    return (w, a_log, dt_bias), (x, cs, ba, st)


def _layer(shape, weights, x, cs, ba, st):
    hk, hv, dk, dv, k = SHAPES[shape]
    w, a_log, dt_bias = weights
    y, cs = torch.ops.metrale.causal_conv1d(x, w, cs, x.shape[-1], k, "gdn", "conv")
    o, st = torch.ops.metrale.gated_delta_rule(y, ba, a_log, dt_bias, st, hk, hv, dk, dv, "gdn", "rule")
    return y, cs, o, st


def _cuda(ts):
    return tuple(t.to(DEV) for t in ts)


def _rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_are_the_cpu_reference(shape, dtype):
    weights, ins = _case(shape, 3, 9, dtype, 1)
    want = _layer(shape, weights, *ins)  # CPU: the reference
    got = _layer(shape, _cuda(weights), *_cuda(ins))
    for name, g, w in zip(("conv y", "conv state", "rule y", "rule state"), got, want):
        assert torch.isfinite(g.float()).all(), name
        diff = int((g.cpu() != w).sum())
        print(f"{shape} {dtype} {name}: {diff} of {w.numel()} elements differ, rel {_rel(g, w):.2e}")
        assert _rel(g, w) <= tolerances.OP_NON_PROJECTION["GatedDeltaRule"], name
    assert torch.equal(got[1].cpu(), want[1])  # the conv state is a copy
    # The same operations in the same order, each correctly rounded on both sides (the reference's
    # square root too: numerics.sqrt_rn), the transcendentals in float64 rounded once: same bits.
    bad = [name for name, g, w in zip(("conv y", "conv state", "rule y", "rule state"), got, want)
           if not torch.equal(g.cpu().contiguous().view(torch.uint8), w.contiguous().view(torch.uint8))]
    assert not bad, f"not bitwise the CPU reference: {bad}"


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_sequence_alone_and_in_a_batch_has_the_same_bits(shape, dtype):
    weights, ins = _case(shape, 64, 5, dtype, 2)
    weights, ins = _cuda(weights), _cuda(ins)
    for n in (2, 3, 17, 64):
        together = _layer(shape, weights, *(t[:n] for t in ins))
        for i in (0, n - 1):
            alone = _layer(shape, weights, *(t[i:i + 1] for t in ins))
            for a, b in zip(alone, together):
                assert torch.equal(a[0], b[i]), (n, i)


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_chunked_calls_give_the_bits_of_one_call(shape, chunk):
    s = 130
    weights, ins = _case(shape, 2, s, torch.bfloat16, 3)
    weights, (x, cs, ba, st) = _cuda(weights), _cuda(ins)
    whole = _layer(shape, weights, x, cs, ba, st)
    ys, os = [], []
    for p in range(0, s, chunk):
        y, cs, o, st = _layer(shape, weights, x[:, p:p + chunk], cs, ba[:, p:p + chunk], st)
        ys.append(y)
        os.append(o)
    assert torch.equal(torch.cat(ys, 1), whole[0]) and torch.equal(torch.cat(os, 1), whole[2])
    assert torch.equal(cs, whole[1]) and torch.equal(st, whole[3])


def test_run_to_run_bits_are_the_same():
    weights, ins = _case("next80b", 8, 33, torch.bfloat16, 4)
    weights, ins = _cuda(weights), _cuda(ins)
    first = _layer("next80b", weights, *ins)
    for _ in range(3):
        for a, b in zip(_layer("next80b", weights, *ins), first):
            assert torch.equal(a, b)


def test_prefill_cost_is_reported():
    """Not a speed target (benchmarks hold those): the time of the recurrent form per token, printed."""
    weights, ins = _case("next80b", 1, 4096, torch.bfloat16, 5)
    weights, ins = _cuda(weights), _cuda(ins)
    _layer("next80b", weights, *ins)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    _layer("next80b", weights, *ins)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end)
    print(f"next80b prefill S=4096 B=1: conv + rule {ms:.2f} ms ({1000 * ms / 4096:.2f} us a token)")
    assert ms > 0
