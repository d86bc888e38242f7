"""The reference ops' expanded weights: W4A16's fast dequantization equals the contract's formula bit
for bit, and inside ``weight_cache.reuse()`` an expansion is shared by equal tensors only (by
content: a tensor changed in place, at the same address, gets its own)."""

from __future__ import annotations

import pytest
import torch

from metrale_export.ops import w4a4, w4a16, w8a8, weight_cache
from metrale_export.ops.numerics import bf16_round


@pytest.mark.parametrize("n,k,group,symmetric", [(1, 128, 128, False), (7, 256, 128, True), (3, 200, 128, False),
                                                 (31, 1000, 64, False), (5, 96, 32, True)])
def test_w4a16_bf16_dequantization_equals_the_formula(n, k, group, symmetric):
    g = torch.Generator().manual_seed(n * k)
    w = torch.randn(n, k, generator=g) * 3
    w[0, :5] = 0  # a group holding zeros
    q = w4a16.quantize(w, group, symmetric=symmetric)
    want = bf16_round(w4a16.dequantize(q.weight, q.weight_scale, q.zero_point, group))
    got = w4a16.dequantize_bf16(q.weight, q.weight_scale, q.zero_point, group)
    assert got.dtype == torch.float32 and got.is_contiguous()
    assert torch.equal(got, want)


def _w4a16(seed: int, n: int = 64, k: int = 256):
    g = torch.Generator().manual_seed(seed)
    return w4a16.quantize(torch.randn(n, k, generator=g), 128, symmetric=False)


def test_reuse_expands_once_per_content():
    q = _w4a16(0)
    calls = []

    def make():
        calls.append(1)
        return w4a16.dequantize_bf16(q.weight, q.weight_scale, q.zero_point, 128)

    args = (q.weight, q.weight_scale, q.zero_point)
    with weight_cache.reuse():
        a = weight_cache.expanded("w4a16", args, (128,), make)
        # Equal tensors at other addresses (ONNX Runtime's copy) share the expansion.
        b = weight_cache.expanded("w4a16", tuple(t.clone() for t in args), (128,), make)
        assert b is a and len(calls) == 1
        # Another group size is another expansion.
        weight_cache.expanded("w4a16", args, (64,), make)
        assert len(calls) == 2
        # The same buffer changed in place: its own expansion, never the stale one.
        q.weight_scale[5, 0] *= 1.5
        c = weight_cache.expanded("w4a16", args, (128,), make)
        assert len(calls) == 3 and not torch.equal(c, a)
    # Outside a block nothing is kept.
    weight_cache.expanded("w4a16", args, (128,), make)
    weight_cache.expanded("w4a16", args, (128,), make)
    assert len(calls) == 5 and not weight_cache.active()


@pytest.mark.parametrize("fmt", ["w4a16", "w8a8-fp8", "w8a8-bf16", "w4a4-nvfp4", "w4a4-bf16"])
def test_reference_ops_give_the_same_result_inside_and_outside_reuse(fmt):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(48, 256, generator=g)
    x = torch.randn(7, 256, generator=g)
    if fmt == "w4a16":
        q = w4a16.quantize(w, 128, symmetric=False)
        run = lambda: w4a16.proj(x, q.weight, q.weight_scale, q.zero_point, None, 128)  # noqa: E731
    elif fmt.startswith("w8a8"):
        q = w8a8.quantize(w, "channel")
        run = lambda: w8a8.proj(x, q.weight, q.weight_scale, None, "channel", fmt.split("-")[1])  # noqa: E731
    else:
        q = w4a4.quantize(w)
        run = lambda: w4a4.proj(x, q.weight, q.weight_scale, q.weight_global_scale, None, None,  # noqa: E731
                                fmt.split("-")[1])
    plain = run()
    with weight_cache.reuse():
        first, second = run(), run()
    assert torch.equal(first, plain) and torch.equal(second, plain)


def test_an_entry_holds_the_tensors_it_was_made_from_not_copies():
    """A block keeps no second copy of a layer's quantized weights: the entry refers to the tensors
    given (a copy per weight was a second copy of every layer's codes)."""
    q = _w4a16(2)
    args = (q.weight, q.weight_scale, q.zero_point)
    with weight_cache.reuse():
        weight_cache.expanded("w4a16", args, (128,), lambda: torch.zeros(1))
        (held, *_), = [e for entries in weight_cache._entries.values() for e in entries]
        assert all(h is t for h, t in zip(held, args))
        # Written in place after the entry was made: never taken, though it is the same object.
        q.weight_scale[0, 0] *= 2
        again = weight_cache.expanded("w4a16", args, (128,), lambda: torch.ones(1))
        assert torch.equal(again, torch.ones(1))
