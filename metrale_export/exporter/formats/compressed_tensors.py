"""compressed-tensors checkpoints (what llm-compressor writes): ``quantization_config`` with
``quant_method: compressed-tensors`` in config.json.

Supported (docs/formats.md has the exact mappings):
- ``pack-quantized`` int4 W4A16, symmetric or asymmetric, group 32/64/128 -> ``W4A16Proj``;
- ``float-quantized`` FP8 weights, per-tensor / per-channel / 128x128 block scales, with dynamic
  per-token, dynamic per-group-128, static per-tensor or no activation quantization -> ``W8A8Proj``;
- ``nvfp4-pack-quantized`` NVFP4 weights (group 16, e4m3 scales, global scale), static activation
  global scale or weights only -> ``W4A4Proj``.
Invariants: one quantization scheme for all quantized Linear modules (the contract has one kind per
export); a module is quantized when its compressed tensors are present and the config targets it.
"""

from __future__ import annotations

import torch

from ...contract import GROUP_SIZES
from ...errors import Check, CheckpointError, InputError
from ...ops import w4a16
from ...ops.numerics import FP8_BLOCK, NVFP4_BLOCK
from ..projection import DEFAULT_ACTIVATION, ProjSpec
from .base import (F32, FP8_DTYPES, I8, SCALE_DTYPES, DeclaredSource, ceil_div, match_module,
                   packed_int32_nibbles, refuse_declaration, to_channel_scale, to_scalar)

NO_ACTIVATION = "none (bf16, not quantized)"
FP8_WEIGHT_SCALES = {"tensor": "per tensor (broadcast to per channel)", "channel": "per output channel",
                     "block": "per 128x128 block"}
FORMATS = {"pack-quantized": "w4a16", "float-quantized": "w8a8", "naive-quantized": "w8a8",
           "nvfp4-pack-quantized": "w4a4"}


def _single_group(q: dict, where: str) -> tuple[dict, str]:
    """The one config group of ``quantization_config`` ``q`` and its format (the group's, else the
    config's); ``InputError`` unless there is exactly one group and one format."""
    groups = q.get("config_groups") or {}
    if not isinstance(groups, dict) or not groups:
        raise InputError(f"{where}: expected a non-empty 'config_groups' object")
    formats = _group_formats(groups, q)
    if len(groups) != 1 or len(formats) != 1:
        raise InputError(
            f"{where}: {len(groups)} config groups with formats {sorted(formats)}; one scheme for "
            "every quantized Linear is supported (the export has one weight format)"
        )
    return next(iter(groups.values())), formats.pop()


def _group_formats(groups: dict, q: dict) -> set[str]:
    return {str(g.get("format") or q.get("format")) for g in groups.values() if isinstance(g, dict)}


def _fp8_activation_scheme(a: dict) -> dict | None:
    """The FP8 activation quantization ``a`` declares as the contract runs it, or None (unsupported)."""
    strategy, dynamic = a.get("strategy"), a.get("dynamic")
    if strategy == "token" and dynamic:
        return {"activation_format": "fp8", "activation_scale_granularity": "row", "note": "dynamic per token"}
    if strategy == "group" and dynamic and a.get("group_size") == FP8_BLOCK:
        return {"activation_format": "fp8", "activation_scale_granularity": "row_block128",
                "note": "dynamic per token and group of 128"}
    if strategy == "tensor" and not dynamic:
        # The contract has no per-tensor activation scale (row invariance); a dynamic per-row
        # scale replaces the static one (never coarser). docs/formats.md says so.
        return {"activation_format": "fp8", "activation_scale_granularity": "row",
                "note": "static per-tensor input_scale replaced by dynamic per-row scales"}
    return None


class CompressedTensorsSource(DeclaredSource):
    format_name = "compressed-tensors"

    @classmethod
    def detect(cls, ckpt) -> bool:
        return cls.declares(ckpt, "compressed-tensors")

    def __init__(self, checkpoint, request):
        self.checkpoint = checkpoint
        q = dict(checkpoint.config.get("quantization_config") or {})
        where = self.qconfig_where(checkpoint)
        self.group, self.fmt = _single_group(q, where)
        if self.fmt not in FORMATS:
            raise InputError(
                f"{where}: format {self.fmt!r} is not supported; supported: {', '.join(sorted(FORMATS))} "
                "(int8 'int-quantized', mxfp and sparse formats have no op in the metrale contract)"
            )
        self.kind = FORMATS[self.fmt]
        self.targets = self.group.get("targets") or []
        self.ignore = q.get("ignore") or []
        self.w = self.group.get("weights") or {}
        self.a = self.group.get("input_activations")
        self._check_scheme(where)
        super().__init__(checkpoint, request)

    # --- the scheme -------------------------------------------------------------------------
    def _check_scheme(self, where: str) -> None:
        self.w_strategy = self.w.get("strategy")
        {"w4a16": self._check_int4, "w8a8": self._check_fp8}.get(self.kind, self._check_nvfp4)(where)

    def _check_int4(self, where: str) -> None:
        w, a = self.w, self.a
        bits, wtype, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
        sizes = ", ".join(map(str, GROUP_SIZES[:-1])) + f" or {GROUP_SIZES[-1]}"
        refuse_declaration(where, Check.of([
            f"pack-quantized with {bits}-bit {wtype} weights; only 4-bit int is supported"
            if bits != 4 or wtype != "int" else None,
            f"int4 weights with strategy {strategy!r} and group size {w.get('group_size')}; "
            f"W4A16Proj needs group quantization with group size {sizes}"
            if strategy != "group" or w.get("group_size") not in GROUP_SIZES else None,
            f"act-order {w.get('actorder')!r} stores a g_idx permutation; W4A16Proj needs "
            "contiguous groups (re-quantize with actorder 'static' or none)"
            if w.get("actorder") not in (None, "static", False) else None,
            f"int4 weights with {a.get('num_bits')}-bit {a.get('type')} activations (W4A8); "
            "the metrale contract runs int4 weights with bf16 activations only" if a is not None else None,
        ]))
        self.group_size = int(w["group_size"])
        self.symmetric = bool(w.get("symmetric", True))

    def _check_fp8(self, where: str) -> None:
        w = self.w
        bits, wtype, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
        reasons = [f"{bits}-bit {wtype} weights; only FP8 (8-bit float) is supported"] \
            if bits != 8 or wtype != "float" else []
        if strategy == "block":
            if list(w.get("block_structure") or []) != [FP8_BLOCK, FP8_BLOCK]:
                reasons.append(f"FP8 block structure {w.get('block_structure')}; only [128, 128] is supported")
            self.granularity = "block128"
        elif strategy in ("channel", "tensor"):
            self.granularity = "channel"
        else:
            reasons.append(f"FP8 weight strategy {strategy!r}; supported: tensor, channel, block")
        self.act = self._fp8_activation(reasons)
        refuse_declaration(where, Check.of(reasons))

    def _check_nvfp4(self, where: str) -> None:
        w, a = self.w, self.a
        bits, wtype = w.get("num_bits"), w.get("type")
        reasons = [f"nvfp4-pack-quantized with {bits}-bit {wtype} group {w.get('group_size')}; expected NVFP4 (4-bit float, group 16)"] \
            if bits != 4 or wtype != "float" or w.get("group_size") != NVFP4_BLOCK else []
        self.act_nvfp4 = a is not None and a.get("num_bits") == 4 and a.get("type") == "float"
        self.static_input = self.act_nvfp4 and a.get("dynamic") in (False, "local")
        refuse_declaration(where, Check.of(reasons + self._nvfp4_activation_reasons()))

    def _nvfp4_activation_reasons(self) -> list[str]:
        """Why the declared activations of NVFP4 weights cannot be exported (none: they can)."""
        a = self.a
        if self.act_nvfp4 and not self.static_input:
            return ["fully dynamic NVFP4 activations (per-tensor global scale at run time) have no row-invariant equivalent; expected dynamic 'local' with a stored input_global_scale"]
        if a is not None and not self.act_nvfp4:
            return [f"NVFP4 weights with {a.get('num_bits')}-bit {a.get('type')} activations are not supported"]
        return []

    def _fp8_activation(self, reasons: list[str]) -> dict:
        """The declared FP8 activation; an unsupported one adds its reason to ``reasons`` (and is {})."""
        a = self.a
        if a is None:
            return {"activation_format": "bf16", "activation_scale_granularity": "row", "note": "weights only (W8A16)"}
        if a.get("num_bits") != 8 or a.get("type") != "float":
            reasons.append(f"FP8 weights with {a.get('num_bits')}-bit {a.get('type')} activations are not supported")
            return {}
        scheme = _fp8_activation_scheme(a)
        if scheme is None:
            reasons.append(f"FP8 activations with strategy {a.get('strategy')!r} dynamic={a.get('dynamic')!r} "
                           "are not supported")
            return {}
        return scheme

    def declared_activation(self) -> str:
        if self.kind == "w4a16":
            return "bf16"
        if self.kind == "w8a8":
            return self.act["activation_format"]
        return "nvfp4" if self.act_nvfp4 else "bf16"

    def summary(self) -> dict:
        w = self.w
        out = {"scheme": self.fmt, "bits": w.get("num_bits")}
        if self.kind == "w4a16":
            out.update(weights="int4", group_size=self.group_size, symmetric=self.symmetric,
                       weight_scales="per group along K", activation=NO_ACTIVATION)
        elif self.kind == "w8a8":
            out.update(weights="fp8 e4m3", weight_scales=FP8_WEIGHT_SCALES[self.w_strategy],
                       activation=NO_ACTIVATION if self.a is None else f"fp8 {self.act['note']}")
            if self.a is not None:
                out["activation_scale_granularity"] = self.act["activation_scale_granularity"]
        else:
            out.update(weights="nvfp4 (e2m1)", group_size=NVFP4_BLOCK,
                       weight_scales="e4m3 per group x a global weight_global_scale",
                       activation=("nvfp4, static global scale (input_global_scale), e4m3 per group of 16 "
                                   "at run time" if self.act_nvfp4 else NO_ACTIVATION))
        return out

    # --- per projection ---------------------------------------------------------------------
    def is_quantized(self, name: str, weight_name: str) -> bool:
        targeted = match_module(self.targets, name) and not match_module(self.ignore, name)
        stored = f"{name}.weight_packed" in self.checkpoint or (
            self.kind == "w8a8" and f"{name}.weight_scale" in self.checkpoint)
        if targeted != stored:
            raise CheckpointError(
                f"{self.checkpoint.root}: {name}: quantization_config {'targets' if targeted else 'does not target'} "
                f"this module but the checkpoint {'does not store' if targeted else 'stores'} its compressed tensors"
            )
        return stored

    def quant_spec(self, name: str, n: int, k: int, family: str, bias: bool) -> ProjSpec:
        layout = {"w4a16": self._int4_layout, "w8a8": self._fp8_layout}.get(self.kind, self._nvfp4_layout)
        tensors, attrs = layout(name, n, k)
        attrs["activation_format"] = self.declared_activation() if self.kind != "w4a16" else DEFAULT_ACTIVATION["w4a16"]
        return ProjSpec(name=name, kind=self.kind, n=n, k=k, family=family, tensors=tensors,
                        attrs=attrs, source=f"{name}.weight_packed" if self.kind != "w8a8" else f"{name}.weight")

    # Each (name, n, k) -> the spec's tensors and attrs, after checking the stored tensors' headers.
    def _int4_layout(self, name: str, n: int, k: int) -> tuple[dict, dict]:
        ck, g = self.checkpoint, self.group_size
        if k % g or k % 8:
            raise CheckpointError(f"{name}: K={k} is not a multiple of group size {g}")
        ck.expect(f"{name}.weight_packed", (n, k // 8), (torch.int32,))
        ck.expect(f"{name}.weight_scale", (n, k // g), SCALE_DTYPES, hint=f" for group size {g}")
        ck.expect(f"{name}.weight_shape", (2,), (torch.int64, torch.int32))
        tensors = {"weight": ((n, k // 2), I8), "weight_scale": ((n, k // g), w4a16.SCALE_DTYPE)}
        if not self.symmetric:
            ck.expect(f"{name}.weight_zero_point", (ceil_div(n, 8), k // g), (torch.int32,),
                      hint=" (int4 zero points packed 8 a word along N)")
            tensors["zero_point"] = ((n, k // g), I8)
        return tensors, {"group_size": g}

    def _fp8_layout(self, name: str, n: int, k: int) -> tuple[dict, dict]:
        ck = self.checkpoint
        ck.expect(f"{name}.weight", (n, k), FP8_DTYPES)
        if self.granularity == "block128":
            ck.expect(f"{name}.weight_scale", (ceil_div(n, FP8_BLOCK), ceil_div(k, FP8_BLOCK)), SCALE_DTYPES,
                      hint=" (one scale per 128x128 block)")
            ws = (ceil_div(n, FP8_BLOCK), ceil_div(k, FP8_BLOCK))
        else:
            self.scalar_or_vector(f"{name}.weight_scale", n)
            ws = (n,)
        tensors = {"weight": ((n, k), I8), "weight_scale": (ws, F32)}
        return tensors, {"weight_scale_granularity": self.granularity,
                         "activation_scale_granularity": self.act["activation_scale_granularity"]}

    def _nvfp4_layout(self, name: str, n: int, k: int) -> tuple[dict, dict]:
        ck = self.checkpoint
        if k % NVFP4_BLOCK:
            raise CheckpointError(f"{name}: NVFP4 needs K to be a multiple of 16, found K={k}")
        ck.expect(f"{name}.weight_packed", (n, k // 2), (torch.uint8, torch.int8))
        ck.expect(f"{name}.weight_scale", (n, k // NVFP4_BLOCK), FP8_DTYPES)
        self.scalar_or_vector(f"{name}.weight_global_scale")
        tensors = {"weight": ((n, k // 2), I8), "weight_scale": ((n, k // NVFP4_BLOCK), I8),
                   "weight_global_scale": ((1,), F32)}
        if self.act_nvfp4:
            self.scalar_or_vector(f"{name}.input_global_scale")
            tensors["input_scale"] = ((1,), F32)
        return tensors, {}

    def quant_load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        ck, name, n, k = self.checkpoint, spec.name, spec.n, spec.k
        if self.kind == "w4a16":
            shape = ck.get(f"{name}.weight_shape").tolist()
            if shape != [n, k]:
                raise CheckpointError(f"{ck.root}: {name}.weight_shape: expected [{n}, {k}], found {shape}")
            # 8 codes a little-endian int32, element i at bits 4i: the bytes are already the
            # contract's low-nibble-first pairs; codes are stored offset by +8 (unsigned).
            out = {"weight": ck.get(f"{name}.weight_packed").view(torch.int8).reshape(n, k // 2),
                   "weight_scale": w4a16.store_scale(ck.get(f"{name}.weight_scale"))}  # bf16: exact
            if not self.symmetric:
                zp = ck.get(f"{name}.weight_zero_point")  # [ceil(N/8), G], packed along N
                codes = packed_int32_nibbles(zp.t().contiguous())[:, :n]  # [G, N], value + 8
                out["zero_point"] = codes.t().contiguous().to(torch.int8)
            return out
        if self.kind == "w8a8":
            w = ck.get(f"{name}.weight").view(torch.int8)
            s = ck.get(f"{name}.weight_scale")
            s = s.to(F32).contiguous() if self.granularity == "block128" else to_channel_scale(s, n)
            return {"weight": w, "weight_scale": s}
        return {"weight": ck.get(f"{name}.weight_packed").view(torch.int8),
                "weight_scale": ck.get(f"{name}.weight_scale").view(torch.int8), **self.scalars(spec)}

    def scalars(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        if self.kind != "w4a4":
            return {}
        # NVFP4: compressed-tensors stores the *divisor* global scale G (w = q * (s / G));
        # the contract multiplies by gw, so gw = 1 / G (a float32 division, docs/formats.md).
        ck, name = self.checkpoint, spec.name
        out = {"weight_global_scale": 1.0 / to_scalar(ck.get(f"{name}.weight_global_scale"))}
        if self.act_nvfp4:
            out["input_scale"] = 1.0 / to_scalar(ck.get(f"{name}.input_global_scale"))
        return out

