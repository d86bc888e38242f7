"""GPTQ checkpoints (AutoGPTQ / GPTQModel / optimum): ``qweight``, ``qzeros``, ``scales``, ``g_idx``.

Layout (4-bit; ``quantization_config`` with ``quant_method: gptq`` in config.json, or
``quantize_config.json``): ``qweight`` int32 [K/8, N], code of (k, n) in bits 4*(k % 8) of word
[k // 8, n]; ``qzeros`` int32 [K/g, N/8], zero of (group, n) in bits 4*(n % 8) of word
[group, n // 8]; ``scales`` fp16 [K/g, N]; ``g_idx`` int32 [K], the group of input channel k.
Dequantization: w[n, k] = (q[k, n] - z[g_idx[k], n]) * s[g_idx[k], n], where for
``checkpoint_format`` ``gptq`` (v1, the default) the stored zero is the true zero *minus one*
(z = stored + 1) and for ``gptq_v2`` the stored zero is z.

Mapping to ``W4A16Proj``: codes transposed to [N, K] and repacked two a byte; scales transposed and
rounded once to bfloat16 (``w4a16.store_scale``: the op's scales are bf16, docs/formats.md); zero points z as int8 0..15 (a v1 zero of 16, possible when the
quantizer wrapped a zero of 0, has no contract code and is refused). ``sym: true`` exports without
zero points after checking every z is 8. Act-order (``desc_act``): the contract's groups are
contiguous ranges of k, so the checkpoint is accepted only when ``g_idx[k] == k // group_size``
(e.g. ``static_groups``); any other ``g_idx`` would need the activation's columns permuted before
the op and is refused with that explanation.
"""

from __future__ import annotations

import torch

from ...errors import OK, Check, CheckpointError, InputError, all_of
from ...ops.numerics import pack_nibbles
from ...ops.w4a16 import GROUP_SIZES, SCALE_DTYPE, store_scale
from ..checkpoint import read_json_object
from ..projection import ProjSpec
from .base import F32, I8, SCALE_DTYPES, DeclaredSource, ceil_div, packed_int32_nibbles, refuse_declaration


class Int4KNSource(DeclaredSource):
    """Shared by GPTQ and AWQ: int4 codes stored [K, N]-major in int32 words, fp16 scales [G, N]."""

    kind = "w4a16"
    quant_method = ""
    config_file = ""

    @classmethod
    def detect(cls, ckpt) -> bool:
        q = ckpt.config.get("quantization_config")
        if isinstance(q, dict) and str(q.get("quant_method", "")).lower() == cls.quant_method:
            return True
        return bool(cls.config_file) and (ckpt.root / cls.config_file).is_file() and not isinstance(q, dict)

    @classmethod
    def read_qconfig(cls, ckpt) -> dict:
        q = ckpt.config.get("quantization_config")
        if isinstance(q, dict):
            return dict(q)
        return read_json_object(ckpt.root / cls.config_file, InputError)

    def __init__(self, checkpoint, request):
        q = self.read_qconfig(checkpoint)
        self.where = f"{checkpoint.root}: {self.quant_method} quantization config"
        bits = q.get("bits", q.get("w_bit"))
        g = q.get("group_size", q.get("q_group_size"))
        refuse_declaration(self.where, all_of([Check.of([
            f"{bits}-bit weights; only 4-bit is supported" if bits != 4 else None,
            f"group_size {g}; W4A16Proj supports {', '.join(map(str, GROUP_SIZES))}" if g not in GROUP_SIZES else None,
        ]), self.layout_check(q)]))
        self.group_size = int(g)
        self.exclude = q.get("modules_to_not_convert") or []
        self.q = q
        self.configure(q)
        super().__init__(checkpoint, request)

    def layout_check(self, q: dict) -> Check:
        """Whether the declared layout is one this reader unpacks: every reason it is not."""
        return OK

    def configure(self, q: dict) -> None:
        self.symmetric = False

    def summary(self) -> dict:
        return {"weights": "int4", "bits": 4, "group_size": self.group_size, "symmetric": self.symmetric,
                "weight_scales": "per group along K", "activation": "none (bf16, not quantized)"}

    def is_quantized(self, name: str, weight_name: str) -> bool:
        return self.stored_unless_excluded(name, "qweight", "listed in modules_to_not_convert")

    def qweight_shape(self, n: int, k: int) -> tuple[int, int]:
        raise NotImplementedError

    def quant_spec(self, name: str, n: int, k: int, family: str, bias: bool) -> ProjSpec:
        ck, g = self.checkpoint, self.group_size
        if k % g or k % 8 or n % 8:
            raise CheckpointError(f"{name}: [N, K] = [{n}, {k}]: {self.quant_method} needs K a multiple of the group size {g} and of 8, and N a multiple of 8")
        ck.expect(f"{name}.qweight", self.qweight_shape(n, k), (torch.int32,))
        ck.expect(f"{name}.scales", (k // g, n), SCALE_DTYPES, hint=f" for group size {g}")
        ck.expect(f"{name}.qzeros", (k // g, ceil_div(n, 8)), (torch.int32,))
        self.check_g_idx(name, n, k)
        tensors = {"weight": ((n, k // 2), I8), "weight_scale": ((n, k // g), SCALE_DTYPE)}
        if not self.symmetric:
            tensors["zero_point"] = ((n, k // g), I8)
        return ProjSpec(name=name, kind="w4a16", n=n, k=k, family=family, tensors=tensors,
                        attrs={"group_size": g, "activation_format": "bf16"}, source=f"{name}.qweight")

    def check_g_idx(self, name: str, n: int, k: int) -> None:
        pass

    def unpack_codes(self, qweight: torch.Tensor, n: int, k: int) -> torch.Tensor:
        """uint8 codes [N, K]."""
        raise NotImplementedError

    def unpack_zeros(self, qzeros: torch.Tensor, n: int) -> torch.Tensor:
        """int16 zero points [G, N] as the formula uses them."""
        raise NotImplementedError

    def quant_load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        ck, name, n, k = self.checkpoint, spec.name, spec.n, spec.k
        codes = self.unpack_codes(ck.get(f"{name}.qweight"), n, k)
        z = self.unpack_zeros(ck.get(f"{name}.qzeros"), n).t().contiguous()  # [N, G]
        bad = (z < 0) | (z > 15)
        if bad.any():
            r, c = (int(i) for i in bad.nonzero()[0])
            raise CheckpointError(
                f"{ck.root}: {name}.qzeros: the zero point of row {r}, group {c} is {int(z[r, c])}, outside "
                f"the int4 codes 0..15 the contract can store"
                + (" (a GPTQ v1 zero of 0 stored as -1 and wrapped: re-quantize, or convert to gptq_v2)"
                   if int(z[r, c]) == 16 else "")
            )
        out = {"weight": pack_nibbles(codes), "weight_scale": store_scale(ck.get(f"{name}.scales")).t().contiguous()}
        if self.symmetric:
            if not bool((z == 8).all()):
                raise CheckpointError(f"{ck.root}: {name}.qzeros: the config says sym: true, but not every zero point is 8")
        else:
            out["zero_point"] = z.to(torch.int8)
        return out


class GptqSource(Int4KNSource):
    format_name = "gptq"
    quant_method = "gptq"
    config_file = "quantize_config.json"

    def layout_check(self, q: dict) -> Check:
        fmt = q.get("checkpoint_format", "gptq")
        return Check.of([f"checkpoint_format {fmt!r}; supported: gptq, gptq_v2 (marlin/bitblas repacked "
                         "layouts are not)" if fmt not in ("gptq", "gptq_v2") else None])

    def configure(self, q: dict) -> None:
        fmt = q.get("checkpoint_format", "gptq")
        self.v1 = fmt == "gptq"
        self.symmetric = bool(q.get("sym", True))
        self.desc_act = bool(q.get("desc_act", False))

    def summary(self) -> dict:
        return {**super().summary(), "scheme": "v1 (checkpoint_format gptq, zero points stored minus one)" if self.v1
                else "v2 (checkpoint_format gptq_v2)",
                "desc_act": self.desc_act, "g_idx": self.g_idx_state()}

    def g_idx_state(self) -> str | None:
        """Whether the stored g_idx (if any) keeps groups contiguous, for ``describe`` (K integers a
        projection are read)."""
        ck = self.checkpoint
        names = [n for n in ck.names() if n.endswith(".g_idx")]
        for name in names:
            g_idx = ck.get(name).to(torch.int64).reshape(-1)
            if not torch.equal(g_idx, torch.arange(g_idx.numel(), device="cpu") // self.group_size):
                return (f"act-order permutation ({name} is not k // {self.group_size}): the export refuses it, "
                        "W4A16Proj's groups are contiguous")
        return f"contiguous (k // {self.group_size})" if names else None

    def qweight_shape(self, n: int, k: int) -> tuple[int, int]:
        return (k // 8, n)

    def check_g_idx(self, name: str, n: int, k: int) -> None:
        ck, gname = self.checkpoint, f"{name}.g_idx"
        if gname not in ck:
            if self.desc_act:
                raise CheckpointError(f"{ck.root}: {gname} is missing; desc_act checkpoints need it")
            return
        ck.expect(gname, (k,), (torch.int32, torch.int64))
        # K integers: read now, so an act-order checkpoint is refused before anything is traced.
        g_idx = ck.get(gname).to(torch.int64)
        want = torch.arange(k, device="cpu") // self.group_size  # spec() runs under a meta device context
        if not torch.equal(g_idx, want):
            raise InputError(
                f"{ck.root}: {gname}: act-order (desc_act) groups: g_idx is not k // {self.group_size}, so "
                "a group's input channels are not contiguous. W4A16Proj's groups are contiguous ranges "
                "of K; honouring this g_idx would need the activation's columns permuted before the op, "
                "which the export does not do. Re-quantize with desc_act=false or static_groups=true."
            )

    def unpack_codes(self, qweight: torch.Tensor, n: int, k: int) -> torch.Tensor:
        # word [i, n] holds k = 8i .. 8i+7 in bits 0..31: nibbles along a new last axis, then K-major.
        nib = packed_int32_nibbles(qweight.t().contiguous())  # [N, K]: word order then nibble order
        return nib

    def unpack_zeros(self, qzeros: torch.Tensor, n: int) -> torch.Tensor:
        z = packed_int32_nibbles(qzeros)[:, :n].to(torch.int16)
        return z + 1 if self.v1 else z
