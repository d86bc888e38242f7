"""NVIDIA ModelOpt Hugging Face exports (``export_hf_checkpoint``): ``hf_quant_config.json`` beside
the weights and/or ``quantization_config`` with ``quant_method: modelopt`` in config.json.

Supported ``quant_algo``:
- ``NVFP4``: ``weight`` uint8 [N, K/2] (e2m1 codes, even k in the low nibble), ``weight_scale``
  e4m3 [N, K/16], ``weight_scale_2`` float32 [] (the multiplying global scale), ``input_scale``
  float32 [] (static activation global scale) -> ``W4A4Proj`` exactly as stored;
- ``FP8`` (per-tensor weight scale, static per-tensor ``input_scale``) and
  ``FP8_PER_CHANNEL_PER_TOKEN`` (per-channel weight scale, dynamic per-token activations) ->
  ``W8A8Proj`` with ``channel`` scales (a per-tensor scale broadcast, exact) and dynamic ``row``
  activation scales.
Invariants: ``exclude_modules`` (glob patterns) and missing ``weight_scale`` tensors leave a
projection in float; the stored bits are passed through unchanged.
"""

from __future__ import annotations

import json

import torch

from ...errors import CheckpointError, InputError
from ...ops.numerics import NVFP4_BLOCK
from ..projection import ProjSpec
from .base import F32, FP8_DTYPES, I8, DeclaredSource, to_channel_scale, to_scalar

HF_QUANT_CONFIG = "hf_quant_config.json"
ALGOS = {"NVFP4": "w4a4", "FP8": "w8a8", "FP8_PER_CHANNEL_PER_TOKEN": "w8a8"}


class ModelOptSource(DeclaredSource):
    format_name = "modelopt"

    @classmethod
    def detect(cls, ckpt) -> bool:
        return cls.declares(ckpt, "modelopt") or (ckpt.root / HF_QUANT_CONFIG).is_file()

    @classmethod
    def read_qconfig(cls, ckpt) -> dict:
        path = ckpt.root / HF_QUANT_CONFIG
        if path.is_file():
            try:
                q = json.loads(path.read_text()).get("quantization")
            except (OSError, ValueError, AttributeError) as e:
                raise InputError(f"{path}: not readable JSON with a 'quantization' object ({e})") from e
            if not isinstance(q, dict):
                raise InputError(f"{path}: expected a 'quantization' object")
            return q
        return dict(ckpt.config.get("quantization_config") or {})

    def __init__(self, checkpoint, request):
        q = self.read_qconfig(checkpoint)
        algo = q.get("quant_algo")
        if algo not in ALGOS:
            raise InputError(
                f"{checkpoint.root}: ModelOpt quant_algo {algo!r} is not supported; supported: "
                f"{', '.join(ALGOS)} (int4 AWQ and mixed-precision ModelOpt exports have no reader yet)"
            )
        self.algo = algo
        self.kind = ALGOS[algo]
        self.exclude = q.get("exclude_modules") or q.get("ignore") or []
        if self.kind == "w4a4" and q.get("group_size", NVFP4_BLOCK) != NVFP4_BLOCK:
            raise InputError(f"{checkpoint.root}: NVFP4 group size {q.get('group_size')}; expected 16")
        super().__init__(checkpoint, request)

    def declared_activation(self) -> str:
        return "nvfp4" if self.kind == "w4a4" else "fp8"

    def summary(self) -> dict:
        if self.kind == "w4a4":
            return {"scheme": self.algo, "weights": "nvfp4 (e2m1)", "bits": 4, "group_size": NVFP4_BLOCK,
                    "weight_scales": "e4m3 per group x a global weight_scale_2",
                    "activation": "nvfp4, static global scale (input_scale), e4m3 per group of 16 at run time"}
        if self.algo == "FP8":
            scales, act = ("per tensor (broadcast to per channel)",
                           "fp8 static per-tensor input_scale replaced by dynamic per-row scales")
        else:
            scales, act = "per output channel", "fp8 dynamic per token"
        return {"scheme": self.algo, "weights": "fp8 e4m3", "bits": 8,
                "weight_scales": scales, "activation": act, "activation_scale_granularity": "row"}

    def is_quantized(self, name: str, weight_name: str) -> bool:
        return self.stored_unless_excluded(name, "weight_scale", "excluded from quantization by the config")

    def quant_spec(self, name: str, n: int, k: int, family: str, bias: bool) -> ProjSpec:
        ck = self.checkpoint
        if self.kind == "w4a4":
            if k % NVFP4_BLOCK:
                raise CheckpointError(f"{name}: NVFP4 needs K to be a multiple of 16, found K={k}")
            ck.expect(f"{name}.weight", (n, k // 2), (torch.uint8, torch.int8), hint=" (two e2m1 codes a byte)")
            ck.expect(f"{name}.weight_scale", (n, k // NVFP4_BLOCK), FP8_DTYPES)
            self.scalar_or_vector(f"{name}.weight_scale_2")
            tensors = {"weight": ((n, k // 2), I8), "weight_scale": ((n, k // NVFP4_BLOCK), I8),
                       "weight_global_scale": ((1,), F32)}
            if f"{name}.input_scale" in ck:
                self.scalar_or_vector(f"{name}.input_scale")
                tensors["input_scale"] = ((1,), F32)
            attrs = {"activation_format": "nvfp4"}
        else:
            ck.expect(f"{name}.weight", (n, k), FP8_DTYPES)
            self.scalar_or_vector(f"{name}.weight_scale", n)
            tensors = {"weight": ((n, k), I8), "weight_scale": ((n,), F32)}
            attrs = {"weight_scale_granularity": "channel", "activation_format": "fp8",
                     "activation_scale_granularity": "row"}
        return ProjSpec(name=name, kind=self.kind, n=n, k=k, family=family, tensors=tensors,
                        attrs=attrs, source=f"{name}.weight")

    def scalars(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        if self.kind != "w4a4":
            return {}
        ck, name = self.checkpoint, spec.name
        out = {"weight_global_scale": to_scalar(ck.get(f"{name}.weight_scale_2"))}
        if "input_scale" in spec.tensors:
            out["input_scale"] = to_scalar(ck.get(f"{name}.input_scale"))
        return out

    def quant_load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        ck, name = self.checkpoint, spec.name
        if self.kind == "w4a4":
            return {"weight": ck.get(f"{name}.weight").view(torch.int8),
                    "weight_scale": ck.get(f"{name}.weight_scale").view(torch.int8), **self.scalars(spec)}
        return {"weight": ck.get(f"{name}.weight").view(torch.int8),
                "weight_scale": to_channel_scale(ck.get(f"{name}.weight_scale"), spec.n)}
