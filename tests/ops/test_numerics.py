import pytest
import torch

from metrale_export.ops import numerics as nm


def test_e2m1_rounds_ties_to_even_and_saturates():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e9, -0.3, -2.6, 0.2499])
    want = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -0.5, -3.0, 0.0])
    assert torch.equal(nm.e2m1_decode(nm.e2m1_encode(x)), want)


def test_e2m1_every_code_round_trips():
    codes = torch.arange(16, dtype=torch.uint8)
    values = nm.e2m1_decode(codes)
    back = nm.e2m1_encode(values)
    # -0 (code 8) and +0 (code 0) both decode to zero; the sign bit survives.
    assert torch.equal(back, codes)


def test_e4m3_saturates_and_rounds_to_even():
    x = torch.tensor([1.0625, 1.1875, 500.0, -1000.0, 448.0, 2.0 ** -10])
    got = nm.e4m3_round(x).to(torch.float32)
    assert got.tolist() == [1.0, 1.25, 448.0, -448.0, 448.0, 0.0]
    bits = nm.e4m3_to_bits(nm.e4m3_round(x))
    assert torch.equal(nm.e4m3_from_bits(bits), got)


def test_nibble_packing_low_nibble_first():
    codes = torch.tensor([[1, 2, 15, 0]], dtype=torch.uint8)
    packed = nm.pack_nibbles(codes)
    assert packed.view(torch.uint8).tolist() == [[0x21, 0x0F]]
    assert torch.equal(nm.unpack_nibbles(packed), codes)
    with pytest.raises(ValueError, match="even"):
        nm.pack_nibbles(torch.zeros(1, 3, dtype=torch.uint8))


def _e2m1_by_boundaries(x):
    """The e2m1 code by its definition: the number of rounding boundaries |x| passes (a tie passes
    where it rounds up to the even code), the sign in bit 3, NaN to 0."""
    from metrale_export.ops.numerics import _E2M1_BOUNDS, _E2M1_TIE_UP
    mag = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8)
    for bound, tie_up in zip(_E2M1_BOUNDS, _E2M1_TIE_UP):
        code += (mag >= bound if tie_up else mag > bound).to(torch.uint8)
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def test_e2m1_encode_and_round_follow_the_boundaries_value_by_value():
    """The arithmetic rounding (round(|x| / spacing)) against the boundary definition: every
    boundary and grid value +-3 ulps, both signs, inf, NaN, subnormals, and a strided sweep of every
    float32 in [0, 8]; e2m1_round is the decoded code bit for bit."""
    from metrale_export.ops.numerics import _E2M1_BOUNDS, e2m1_round
    points = torch.tensor(list(_E2M1_BOUNDS) + [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float32)
    near = torch.cat([(points.view(torch.int32) + k).view(torch.float32) for k in range(-3, 4)])
    sweep = torch.arange(0, 0x41000000, 4099, dtype=torch.int64).to(torch.int32).view(torch.float32)
    special = torch.tensor([float("inf"), float("nan"), 1e-40, 3e38, 0.0])
    x = torch.cat([near, sweep, special, torch.randn(100_000) * 3])
    x = torch.cat([x, -x])
    want = _e2m1_by_boundaries(x)
    assert torch.equal(nm.e2m1_encode(x), want)
    assert torch.equal(e2m1_round(x).view(torch.int32), nm.e2m1_decode(want).view(torch.int32))


def test_sqrt_rn_is_correctly_rounded():
    """float32 sqrt, correctly rounded: the float64 root rounded once, as __fsqrt_rn. torch's CPU
    float32 sqrt (vectorized) gave 5.6876631 for this value; the correct root is 5.6876636."""
    import numpy as np

    hard = torch.full((64,), 32.349514, dtype=torch.float32)
    assert nm.sqrt_rn(hard)[0].item() == float(np.sqrt(np.float32(32.349514)))
    x = torch.rand(1 << 16, generator=torch.Generator().manual_seed(0)) * 100
    want = np.sqrt(x.numpy())  # numpy's float32 sqrt: the IEEE operation
    assert np.array_equal(nm.sqrt_rn(x).numpy().view(np.int32), want.view(np.int32))
    assert nm.sqrt_rn(x).dtype == torch.float32
