"""AWQ checkpoints (AutoAWQ ``GEMM`` version): ``qweight``, ``qzeros``, ``scales``.

Layout (4-bit, ``quantization_config`` with ``quant_method: awq``, ``version: gemm``,
``zero_point: true``): ``qweight`` int32 [K, N/8] and ``qzeros`` int32 [K/g, N/8], both packed
along N eight columns a word in AWQ's interleaved order: nibble i (bits 4i) of word [r, c] holds
column 8c + AWQ_ORDER[i], AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]; ``scales`` fp16 [K/g, N].
Dequantization: w[n, k] = (q[k, n] - z[k // g, n]) * s[k // g, n] (zeros stored as is, no offset).

Mapping to ``W4A16Proj``: the interleave undone, codes transposed to [N, K] and repacked two a byte;
zeros to int8 [N, K/g]; scales transposed and rounded once to bfloat16 (``w4a16.store_scale``).
"""

from __future__ import annotations

import torch

from ...errors import Check
from .base import packed_int32_nibbles
from .gptq import Int4KNSource

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
# Column j of a word is nibble AWQ_REVERSE[j].
AWQ_REVERSE = tuple(AWQ_ORDER.index(j) for j in range(8))


def deinterleave(nibbles: torch.Tensor) -> torch.Tensor:
    """[R, 8C] nibbles in storage order -> [R, 8C] in column order."""
    r, c8 = nibbles.shape
    return nibbles.reshape(r, c8 // 8, 8)[:, :, list(AWQ_REVERSE)].reshape(r, c8)


class AwqSource(Int4KNSource):
    format_name = "awq"
    quant_method = "awq"
    config_file = "quant_config.json"

    def layout_check(self, q: dict) -> Check:
        version = str(q.get("version", "gemm")).lower()
        return Check.of([
            f"version {version!r}; only AutoAWQ's 'gemm' layout is supported (gemv/marlin/exllama layouts "
            "pack differently)" if version != "gemm" else None,
            "zero_point false is not supported (AutoAWQ writes zero points)" if not q.get("zero_point", True) else None,
        ])

    def configure(self, q: dict) -> None:
        self.symmetric = False

    def summary(self) -> dict:
        return {**super().summary(), "scheme": "gemm"}

    def qweight_shape(self, n: int, k: int) -> tuple[int, int]:
        return (k, n // 8)

    def unpack_codes(self, qweight: torch.Tensor, n: int, k: int) -> torch.Tensor:
        return deinterleave(packed_int32_nibbles(qweight)).t().contiguous()  # [K, N] -> [N, K]

    def unpack_zeros(self, qzeros: torch.Tensor, n: int) -> torch.Tensor:
        return deinterleave(packed_int32_nibbles(qzeros))[:, :n].to(torch.int16)
