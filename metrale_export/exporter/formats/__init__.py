"""Readers of checkpoints that are already quantized: one module per checkpoint format, each a source
with ``FloatSource``'s interface (``checkpoint``, ``spec``, ``load``) plus ``describe()``.

``detect(ckpt)`` names the format a checkpoint declares (or None for a float checkpoint);
``declared_source(ckpt, request)`` builds its source, refusing requests it cannot honour;
``describe_checkpoint(ckpt)`` is that source's ``describe()`` (what ``inspect`` shows and the
manifest records), ``describe_text`` its one-line form.
docs/formats.md has every layout and mapping. Invariants: detection reads only config files and
tensor names; the first matching reader wins, most specific first.
"""

from __future__ import annotations

from ...errors import InputError
from ..checkpoint import Checkpoint
from ..quantization import QuantRequest
from .awq import AwqSource
from .base import DeclaredSource, describe_text
from .compressed_tensors import CompressedTensorsSource
from .fp8_block import Fp8BlockSource
from .gptq import GptqSource
from .modelopt import ModelOptSource

READERS: tuple[type[DeclaredSource], ...] = (
    CompressedTensorsSource, ModelOptSource, Fp8BlockSource, GptqSource, AwqSource,
)


def detect(ckpt: Checkpoint) -> type[DeclaredSource] | None:
    """The reader of the quantization format ``ckpt`` declares, or None when it declares none."""
    for reader in READERS:
        if reader.detect(ckpt):
            return reader
    q = ckpt.config.get("quantization_config")
    if isinstance(q, dict) and q:
        method = q.get("quant_method", "?")
        raise InputError(
            f"{DeclaredSource.qconfig_where(ckpt)} declares quant_method {method!r}, which has "
            f"no reader; supported: compressed-tensors, modelopt, fp8 (block, weight_scale_inv), gptq, awq"
        )
    return None


def declared_source(ckpt: Checkpoint, request: QuantRequest) -> DeclaredSource | None:
    """The source for a quantized checkpoint, or None for a float checkpoint."""
    reader = detect(ckpt)
    return None if reader is None else reader(ckpt, request)


def describe_checkpoint(ckpt: Checkpoint) -> dict | None:
    """The declared format of ``ckpt`` (``DeclaredSource.describe``), or None for a float checkpoint.

    A declaration the readers refuse raises the same ``InputError`` the export would.
    """
    source = declared_source(ckpt, QuantRequest(weight="declared"))
    return None if source is None else source.describe()


__all__ = ["READERS", "AwqSource", "CompressedTensorsSource", "DeclaredSource", "Fp8BlockSource", "GptqSource",
           "ModelOptSource", "declared_source", "describe_checkpoint", "describe_text", "detect"]
