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
