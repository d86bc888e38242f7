"""``checkpoint.all_finite``, the loaders' check that a weight holds no NaN or infinity, is an
exponent-bits test on the raw bytes (the pre-flight's own, ``safetensors_files.has_nonfinite``):
checked here against ``torch.isfinite`` on every bit pattern of the 8- and 16-bit float types and on
random and special float32 patterns, one element at a time and at every position of a chunked tensor."""

from __future__ import annotations

import pytest
import torch

from metrale_export.exporter.checkpoint import all_finite

_SMALL = [(torch.bfloat16, torch.int16), (torch.float16, torch.int16),
          (torch.float8_e4m3fn, torch.uint8), (torch.float8_e5m2, torch.uint8)]


@pytest.mark.parametrize("dtype,bits", _SMALL, ids=lambda d: str(d).removeprefix("torch."))
def test_every_bit_pattern_agrees_with_isfinite(dtype, bits):
    n = 1 << (8 * torch.empty(0, dtype=dtype).element_size())
    patterns = torch.arange(n, dtype=torch.int32).to(bits) if bits == torch.uint8 else \
        torch.arange(-(n // 2), n // 2, dtype=torch.int32).to(bits)
    values = patterns.view(dtype)
    expected = torch.isfinite(values.float())
    assert not bool(expected.all())  # the patterns hold non-finite values to find
    got = torch.tensor([all_finite(values[i:i + 1]) for i in range(values.numel())])
    assert torch.equal(got, expected)


def test_float32_specials_and_random_patterns():
    g = torch.Generator().manual_seed(0)
    patterns = torch.randint(-2**31, 2**31 - 1, (4000,), generator=g, dtype=torch.int64).to(torch.int32)
    specials = torch.tensor([float("inf"), -float("inf"), float("nan"), -float("nan"), 3.4028235e38,
                             -3.4028235e38, 1e-45, -0.0, 0.0], dtype=torch.float32)
    values = torch.cat((patterns.view(torch.float32), specials))
    got = torch.tensor([all_finite(values[i:i + 1]) for i in range(values.numel())])
    assert torch.equal(got, torch.isfinite(values))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_one_bad_value_anywhere_in_a_chunked_tensor_is_found(bad):
    t = torch.randn(10, 1000).to(torch.bfloat16)
    assert all_finite(t, chunk=64)
    for pos in (0, 63, 64, 9999):
        u = t.clone()
        u.view(-1)[pos] = bad
        assert not all_finite(u, chunk=64)
        assert not all_finite(u.t(), chunk=64)  # not contiguous


def test_integer_tensors_are_finite():
    assert all_finite(torch.full((3,), -1, dtype=torch.int32))
