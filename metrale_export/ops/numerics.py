"""Scalar formats of the op contract (docs/ops.md): bf16, FP8 e4m3fn and NVFP4 e2m1.

Encoders and decoders in torch, CPU or CUDA, used by the weight quantizers, the reference ops and
the tests. Invariants:
- ``e4m3_round`` saturates to +-448 and rounds to nearest even (never NaN for finite input).
- ``e2m1_round`` rounds to {0, .5, 1, 1.5, 2, 3, 4, 6} with ties to the even code and saturates.
- Codes are unsigned nibbles (sign in bit 3) packed two a byte, the even element in the low nibble.
"""

from __future__ import annotations

import torch

from ..contract import E2M1_MAX, E2M1_VALUES, E4M3_MAX, FP8_BLOCK, NVFP4_BLOCK  # noqa: F401  (re-exported)
# Rounding boundaries between consecutive magnitudes and, per boundary, whether a tie rounds up
# (to the even code): 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4.
_E2M1_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E2M1_TIE_UP = (False, True, False, True, False, True, False)


def sqrt_rn(x: torch.Tensor) -> torch.Tensor:
    """The correctly rounded float32 square root of float32 ``x`` (the kernels' ``__fsqrt_rn``):
    the float64 root rounded once. torch's own float32 ``sqrt`` on the CPU is not always correctly
    rounded: its vectorized kernel (AVX512 here, 2026-12-02) gave 5.6876631 for sqrt(32.349514),
    whose correctly rounded root is 5.6876636. The float64 root of a float32 rounds to the correct
    float32 (53 >= 2 * 24 + 2 bits: no double-rounding error for a square root)."""
    return torch.sqrt(x.to(torch.float32).to(torch.float64)).to(torch.float32)


def bf16_round(x: torch.Tensor) -> torch.Tensor:
    """Round float32 values to bfloat16 (RNE) and return them as float32."""
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float32)


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    """Saturating RNE rounding to FP8 e4m3fn; returns a float8_e4m3fn tensor."""
    return x.to(torch.float32).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e4m3_to_bits(x: torch.Tensor) -> torch.Tensor:
    """float8_e4m3fn tensor -> int8 tensor of the same bit patterns."""
    return x.view(torch.int8)


def e4m3_from_bits(bits: torch.Tensor) -> torch.Tensor:
    """int8 (or uint8) bit patterns -> float32 values of FP8 e4m3fn."""
    return bits.contiguous().view(torch.float8_e4m3fn).to(torch.float32)


# Code -> value with the sign (bit 3): the 16 entries of e2m1.
_E2M1_SIGNED = tuple(E2M1_VALUES) + tuple(-v for v in E2M1_VALUES)


def _e2m1_magnitude(x: torch.Tensor) -> torch.Tensor:
    """|x| rounded to the e2m1 magnitudes, NaN to 0, saturating at 6. The grid's spacing is 0.5
    below 2, 1 below 4 and 2 above, so this is ``round(|x| / spacing) * spacing`` with round half
    to even (exact: the spacings are powers of two), which takes every tie of ``_E2M1_BOUNDS`` to
    the even code (tests/ops check it against the boundary definition, value by value)."""
    mag = torch.nan_to_num(x.abs(), nan=0.0, posinf=float("inf"))
    spacing = torch.where(mag < 2.0, 0.5, torch.where(mag < 4.0, 1.0, 2.0))
    return torch.round(mag / spacing).mul_(spacing).clamp_(max=E2M1_MAX)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Round float32 values to e2m1 codes (uint8, 0..15), ties to even, saturating at 6."""
    x = x.to(torch.float32)
    v = _e2m1_magnitude(x)
    # magnitude -> code: 0..2 in halves are codes 0..4; 3 and 4 are 5 and 6; 6 is 7.
    code = torch.where(v <= 2.0, v * 2.0, torch.where(v <= 4.0, v + 2.0, 7.0)).to(torch.uint8)
    return code | (torch.signbit(x).to(torch.uint8) << 3)


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """``e2m1_decode(e2m1_encode(x))`` without the codes: float32 x rounded to the e2m1 grid, the
    sign kept (-0 where a negative value rounds to 0), bit for bit the decoded values."""
    x = x.to(torch.float32)
    v = _e2m1_magnitude(x)
    return torch.where(torch.signbit(x), -v, v)


def e2m1_decode(code: torch.Tensor) -> torch.Tensor:
    """e2m1 codes (any integer dtype, 0..15) -> float32 values (one table lookup: int32 indices of a
    16-entry table, which is 3x faster than the int64 arithmetic on the CPU)."""
    table = torch.tensor(_E2M1_SIGNED, dtype=torch.float32, device=code.device)
    return table[(code & 0xF).to(torch.int32)]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] codes 0..15 -> [..., K/2] int8, element 2j in the low nibble of byte j."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_nibbles: the last dimension must be even, found {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).view(torch.int8)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] int8 or uint8 -> [..., K] uint8 codes 0..15."""
    p = packed.contiguous().view(torch.uint8)
    out = torch.stack((p & 0xF, p >> 4), dim=-1)
    return out.reshape(*p.shape[:-1], p.shape[-1] * 2)
