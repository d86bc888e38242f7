"""GPU tests of the Attention kernel (plugins/attention/) through metrale_export.ops.cuda.

- agreement with the float64 evaluation and the CPU reference of docs/ops.md within the op's bound
  (ATTENTION_BOUND * (P @ |v|) per element), for decode, prefill with and without a past, head dims
  64 / 128 / 256, GQA groups 1 / 2 / 4 / 8, bf16, f16 and float32 (operands rounded to bf16); every element written (outputs are fresh
  ``torch.empty``, checked finite and within bound);
- bitwise: the split and unsplit modes and the decode kernel (every path of the launcher, the
  decode kernel at its CTA counts: one to many per (sequence, kv head)); (a) a sequence alone vs batched with 1..63 others, at every
  place in the batch; (b) prefill in one chunk vs chunks of 1, 7 and 64 tokens vs decode token by
  token; (c) run to run;
- refusals: a head dim or dtype the op does not have.
Skipped, with the reason, where no CUDA device is present; a CUDA machine without the built library
fails (the tests never pass vacuously).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from metrale_export.ops import attention as A  # noqa: E402
from metrale_export.ops import cuda as mcuda  # noqa: E402

DEV = torch.device("cuda")


def _inputs(b, hq, hkv, s, t, d, dtype=torch.bfloat16, seed=0, device=DEV):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, s, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, t, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, t, d, generator=g).to(dtype)
    return q.to(device), k.to(device), v.to(device)


def _run(q, k, v, split=-1, scale=None):
    scale = A.default_scale(q.shape[-1]) if scale is None else scale
    return mcuda.launch_attention(q, k, v, scale, split=split)


CASES = [  # b, hq, hkv, s, t, d
    (1, 4, 2, 1, 1, 64),
    (3, 4, 2, 1, 1000, 64),      # decode over four chunks
    (2, 8, 2, 37, 37, 64),       # prefill, no past
    (2, 8, 8, 70, 300, 128),     # chunked prefill, group 1
    (1, 32, 8, 1, 4097, 128),    # Qwen3-8B decode, a partial last block
    (2, 32, 8, 130, 130, 128),   # Qwen3-8B prefill
    (1, 16, 2, 5, 777, 128),     # group 8
    (1, 16, 2, 1, 600, 256),     # Qwen3-Next's head dim
    (1, 4, 2, 100, 612, 256),
]


@pytest.mark.parametrize("b,hq,hkv,s,t,d", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_within_bound_of_float64_and_reference(b, hq, hkv, s, t, d, dtype):
    q, k, v = _inputs(b, hq, hkv, s, t, d, dtype)
    scale = A.default_scale(d)
    qc, kc, vc = q.cpu(), k.cpu(), v.cpu()
    exact = A.attention_float64(qc, kc, vc, scale)
    bnd = A.bound(qc, kc, vc, scale)
    ref = A.attention_reference(qc, kc, vc, scale)
    for split in (0, 1, -1):
        got = _run(q, k, v, split).cpu()
        assert got.shape == (b, s, hq, d) and got.dtype == dtype
        assert bool(torch.isfinite(got).all())
        err = (got.to(torch.float64) - exact).abs()
        assert bool((err <= bnd).all()), f"split={split}: max error {err.max().item():.3g}"
        diff = (got.to(torch.float64) - ref.to(torch.float64)).abs()
        assert bool((diff <= bnd).all()), f"split={split}: max difference to the reference {diff.max().item():.3g}"
        same = (got == ref).float().mean().item()
        print(f"{(b, hq, hkv, s, t, d)} {dtype} split={split}: {100 * same:.1f}% of elements equal the CPU reference")


@pytest.mark.parametrize("b,hq,hkv,s,t,d", CASES)
def test_split_and_unsplit_give_the_same_bits(b, hq, hkv, s, t, d):
    q, k, v = _inputs(b, hq, hkv, s, t, d, seed=1)
    base = _run(q, k, v, 0)
    assert torch.equal(_run(q, k, v, 1), base)
    assert torch.equal(_run(q, k, v, -1), base)


DECODE_CASES = [  # b, hq, hkv, s, t, d: rows (s * group) <= 16, the decode kernel's shapes
    (1, 32, 8, 1, 33000, 128),   # 129 chunks over many CTAs of one (sequence, kv head)
    (40, 32, 8, 1, 2100, 128),   # 320 (sequence, kv head) pairs: one CTA each
    (2, 8, 8, 9, 700, 128),      # group 1, nine positions (rows with different last keys)
    (1, 4, 2, 8, 1030, 64),      # 16 rows exactly
    (3, 16, 2, 2, 1500, 256),
    (2, 4, 1, 1, 257, 64),       # a last chunk of one key
]


@pytest.mark.parametrize("b,hq,hkv,s,t,d", DECODE_CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_kernel_gives_the_bits_of_split_and_unsplit(b, hq, hkv, s, t, d, dtype):
    q, k, v = _inputs(b, hq, hkv, s, t, d, dtype, seed=6)
    assert mcuda.attention_path(b, hq, hkv, s, t, d) == "decode"
    base = _run(q, k, v, 0)
    assert torch.equal(_run(q, k, v, 1), base)
    assert torch.equal(_run(q, k, v, -1), base)


def test_decode_kernel_can_be_turned_off(monkeypatch):
    q, k, v = _inputs(1, 32, 8, 1, 4097, 128, seed=7)
    fast = _run(q, k, v)
    monkeypatch.setenv("METRALE_ATTENTION_DECODE", "base")
    assert mcuda.attention_path(1, 32, 8, 1, 4097, 128) == "split"
    assert torch.equal(_run(q, k, v), fast)


@pytest.mark.parametrize("s,t,d,hq,hkv", [(1, 1000, 128, 32, 8), (1, 5000, 128, 32, 8), (17, 300, 128, 32, 8),
                                        (1, 333, 64, 4, 2)])
def test_a_sequence_alone_and_batched_with_1_to_63_others(s, t, d, hq, hkv):
    q, k, v = _inputs(64, hq, hkv, s, t, d, seed=2)
    alone = [_run(q[i:i + 1], k[i:i + 1], v[i:i + 1]) for i in (0, 5, 63)]
    for n in range(2, 65):
        out = _run(q[:n], k[:n], v[:n])
        assert torch.equal(out[0:1], alone[0]), f"batch {n}: sequence 0"
        if n > 5:
            assert torch.equal(out[5:6], alone[1]), f"batch {n}: sequence 5"
    assert torch.equal(_run(q, k, v)[63:64], alone[2])
    # The sequences differ, so the comparisons above compare different data.
    assert not torch.equal(alone[0], alone[1])


@pytest.mark.parametrize("d,hq,hkv,p", [(128, 32, 8, 300), (64, 4, 2, 520), (256, 4, 2, 150)])
def test_prefill_chunks_and_decode_give_the_same_bits(d, hq, hkv, p):
    """Prefill of p tokens in one chunk = chunks of 1 (decode token by token), 7 and 64 tokens, each
    chunk over the cache of the tokens before it."""
    q, k, v = _inputs(2, hq, hkv, p, p, d, seed=3)
    full = _run(q, k, v)
    for chunk in (1, 7, 64):
        parts = [_run(q[:, :, i:i + chunk], k[:, :, :i + chunk], v[:, :, :i + chunk]) for i in range(0, p, chunk)]
        got = torch.cat(parts, dim=1)
        bad = (got != full).any(dim=-1).nonzero()
        assert bad.numel() == 0, f"chunk {chunk}: {bad.shape[0]} (seq, token, head) rows differ, first {bad[0].tolist()}"


def test_run_to_run():
    q, k, v = _inputs(8, 32, 8, 64, 2000, 128, seed=4)
    first = _run(q, k, v)
    for _ in range(3):
        assert torch.equal(_run(q, k, v), first)
    qd, kd, vd = q[:, :, -1:].contiguous(), k, v
    first = _run(qd, kd, vd)
    for _ in range(3):
        assert torch.equal(_run(qd, kd, vd), first)


def test_matches_sdpa_closely():
    """A plausibility anchor: torch's own attention of the same inputs within the op's bound."""
    q, k, v = _inputs(2, 32, 8, 200, 200, 128, seed=5)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    got = _run(q, k, v)
    bnd = A.bound(q.cpu(), k.cpu(), v.cpu(), A.default_scale(128))
    err = (got.cpu().to(torch.float64) - ref.transpose(1, 2).cpu().to(torch.float64)).abs()
    assert bool((err <= 2 * bnd).all())


def test_refusals():
    q, k, v = _inputs(1, 4, 2, 1, 10, 96)
    with pytest.raises(mcuda.KernelLibraryError, match="cudaErrorNotSupported"):
        _run(q, k, v)
    q, k, v = _inputs(1, 4, 2, 1, 10, 64, dtype=torch.float32)
    with pytest.raises(TypeError, match="must have one dtype"):
        mcuda.launch_attention(q, k.to(torch.bfloat16), v, 0.125)
