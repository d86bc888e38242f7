"""FP8 block-quantized checkpoints with ``weight_scale_inv`` (the DeepSeek-V3 layout that Qwen3's FP8
models publish): ``quantization_config = {"quant_method": "fp8", "fmt": "e4m3",
"activation_scheme": "dynamic", "weight_block_size": [128, 128]}``.

Tensors per quantized projection: ``weight`` float8_e4m3fn [N, K] and ``weight_scale_inv`` float32
[ceil(N/128), ceil(K/128)]. Despite its name the scale *multiplies*: w = fp8(weight) * scale_inv
(DeepSeek's ``weight_dequant``), which is the contract's ``block128`` weight scale as stored.
Activations: ``dynamic`` means per token and group of 128 -> ``fp8`` with ``row_block128``.
Invariants: ``modules_to_not_convert`` and projections without ``weight_scale_inv`` stay float.
"""

from __future__ import annotations

import torch

from ...errors import Check
from ...ops.numerics import FP8_BLOCK
from ..projection import ProjSpec
from .base import F32, FP8_DTYPES, I8, SCALE_DTYPES, DeclaredSource, ceil_div, refuse_declaration


class Fp8BlockSource(DeclaredSource):
    format_name = "fp8-block (weight_scale_inv)"
    kind = "w8a8"

    @classmethod
    def detect(cls, ckpt) -> bool:
        return cls.declares(ckpt, "fp8")

    def __init__(self, checkpoint, request):
        q = dict(checkpoint.config.get("quantization_config") or {})
        where = self.qconfig_where(checkpoint)
        refuse_declaration(where, Check.of([
            f"fmt {q.get('fmt')!r}; only e4m3 is supported" if q.get("fmt", "e4m3") != "e4m3" else None,
            f"weight_block_size {q.get('weight_block_size')}; only [128, 128] is supported (per-tensor FP8 "
            "checkpoints of this kind store weight_scale: see the ModelOpt reader)"
            if list(q.get("weight_block_size") or []) != [FP8_BLOCK, FP8_BLOCK] else None,
            f"activation_scheme {q.get('activation_scheme')!r}; only 'dynamic' is supported"
            if q.get("activation_scheme", "dynamic") != "dynamic" else None,
        ]))
        self.exclude = q.get("modules_to_not_convert") or q.get("ignored_layers") or []
        super().__init__(checkpoint, request)

    def declared_activation(self) -> str:
        return "fp8"

    def summary(self) -> dict:
        return {"scheme": "quant_method fp8", "weights": "fp8 e4m3", "bits": 8,
                "weight_scales": "per 128x128 block (weight_scale_inv, multiplies)",
                "activation": "fp8 dynamic per token and group of 128 (activation_scheme: dynamic)",
                "activation_scale_granularity": "row_block128"}

    def is_quantized(self, name: str, weight_name: str) -> bool:
        return self.stored_unless_excluded(name, "weight_scale_inv", "listed in modules_to_not_convert")

    def quant_spec(self, name: str, n: int, k: int, family: str, bias: bool) -> ProjSpec:
        ck = self.checkpoint
        ck.expect(f"{name}.weight", (n, k), FP8_DTYPES)
        nb, kb = ceil_div(n, FP8_BLOCK), ceil_div(k, FP8_BLOCK)
        ck.expect(f"{name}.weight_scale_inv", (nb, kb), SCALE_DTYPES, hint=" (one scale per 128x128 block)")
        return ProjSpec(name=name, kind="w8a8", n=n, k=k, family=family,
                        tensors={"weight": ((n, k), I8), "weight_scale": ((nb, kb), F32)},
                        attrs={"weight_scale_granularity": "block128", "activation_format": "fp8",
                               "activation_scale_granularity": "row_block128"},
                        source=f"{name}.weight")

    def quant_load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        ck = self.checkpoint
        return {"weight": ck.get(f"{spec.name}.weight").view(torch.int8),
                "weight_scale": ck.get(f"{spec.name}.weight_scale_inv").to(F32).contiguous()}
