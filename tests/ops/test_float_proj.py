"""The FloatProj CPU reference widens the weight to float32 a slice of rows at a time (an 8B
lm_head widened whole took 2.4 GiB): every column of the product where the whole one has it."""

from __future__ import annotations

import pytest
import torch

from metrale_export.ops import float_proj


@pytest.mark.parametrize("shape", [(14, 4096, 7000), (3, 1, 512, 6145), (1, 96, 257)])
def test_sliced_product_is_the_whole_product(monkeypatch, shape):
    *lead, k, n = shape
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*lead, k, generator=g)
    w = float_proj.store_weight(torch.randn(n, k, generator=g) * 0.02)
    bias = torch.randn(n, generator=g)
    whole = float_proj.proj(x, w, bias)
    monkeypatch.setattr(float_proj, "_CHUNK_BYTES", 1)  # _CHUNK_ROWS rows a slice, a partial last one
    sliced = float_proj.proj(x, w, bias)
    assert sliced.shape == whole.shape == (*lead, n)
    expected = x.to(torch.bfloat16).float() @ w.float().T + bias  # widened whole
    # every column where it belongs (a misplaced slice is off by O(1)); the bits are the CPU GEMM's
    torch.testing.assert_close(sliced, expected, rtol=1e-6, atol=1e-6)
    assert torch.equal(sliced, float_proj.proj(x, w, bias))  # deterministic
