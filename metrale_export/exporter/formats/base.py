"""What every declared-format source shares: the float fallback for layers a checkpoint left
unquantized, the request check, and small header helpers.

A declared-format source has the ``FloatSource`` interface (``checkpoint``, ``spec``, ``load``) plus
``describe()``: the declared format as plain data (``DESCRIBE_KEYS``), which ``inspect`` prints and
the export manifest records, and ``describe_text`` puts into one line for both.

Invariants: nothing is re-quantized: ``load`` only repacks, transposes, widens (bf16/fp16 ->
float32, exact), broadcasts the stored tensors, or rounds int4 group scales once to bfloat16 (the
op's scale dtype, ``w4a16.store_scale``; exact for bf16 checkpoints); a projection is quantized exactly
when its stored tensors say so (``is_quantized``), so ignore lists and an unquantized ``lm_head``
are handled tensor by tensor; every stored tensor is checked against the header before it is read.
"""

from __future__ import annotations

import re

import torch

from ...contract import ceil_div, op_type_of  # noqa: F401  (ceil_div: for the format modules)
from ...errors import Check, CheckpointError, InputError
from ..checkpoint import Checkpoint, all_finite
from .. import fusion
from ..projection import ProjSpec
from ..quantization import FLOAT_DTYPES, FloatSource, QuantRequest

F32, I8 = torch.float32, torch.int8
SCALE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
FP8_DTYPES = (torch.float8_e4m3fn, torch.uint8, torch.int8)

# What ``describe()`` returns for every format (format-specific facts may follow):
# format: the tool's format family; scheme: the variant within it (compressed-tensors' format,
# ModelOpt's quant_algo, GPTQ's checkpoint_format, ...); weight_format: the contract kind it
# exports as; weights / bits / group_size / symmetric / weight_scales: the stored weights;
# activation: what the checkpoint declares for activations; activation_format: the op attribute
# that declaration becomes (the engine builder's ``--activation-quantization declared``).
DESCRIBE_KEYS = ("format", "scheme", "weight_format", "weights", "bits", "group_size", "symmetric",
                 "weight_scales", "activation", "activation_format")


def describe_text(d: dict | None) -> str:
    """One line for a ``describe()`` dict (None: a float checkpoint)."""
    if not d:
        return "none: float weights (the export quantizes them as requested)"
    extra = [f"{k}={d[k]}" for k in sorted(d) if k not in DESCRIBE_KEYS and d[k] is not None]
    scheme = f" {d['scheme']}" if d.get("scheme") else ""
    return (f"{d['format']}{scheme}: {', '.join(_weights_facts(d))}; activations: "
            f"{d.get('activation') or d.get('activation_format')}" + (f"; {', '.join(extra)}" if extra else "")
            + f" -> {op_type_of(d['weight_format']) or d['weight_format']} with activation_format "
            f"{d['activation_format']}")


def _weights_facts(d: dict) -> list[str]:
    """'int4 weights', 'group 128', 'symmetric', 'scales channel': what ``d`` says of the stored weights."""
    weights = [f"{d.get('weights', '?')} weights"]
    if d.get("group_size"):
        weights.append(f"group {d['group_size']}")
    if d.get("symmetric") is not None:
        weights.append("symmetric" if d["symmetric"] else "asymmetric (zero points)")
    if d.get("weight_scales"):
        weights.append(f"scales {d['weight_scales']}")
    return weights


class DeclaredSource:
    """Base class of the sources in ``exporter/formats/``.

    Subclasses set ``format_name`` and ``kind`` (the contract kind a quantized projection exports
    as) and implement ``detect``, ``is_quantized``, ``quant_spec`` and ``quant_load``.
    """

    format_name = "declared"
    kind = "none"

    def kind_for(self, family: str) -> str:
        """The kind a quantized projection of ``family`` exports as: the format's, for every family
        (as ``FloatSource.kind_for``; modules the format excludes stay float projection by projection)."""
        return self.kind

    def __init__(self, checkpoint: Checkpoint, request: QuantRequest):
        self.checkpoint = checkpoint
        self.request = request
        self.qconfig = self.read_qconfig(checkpoint)
        self._float = FloatSource(checkpoint, QuantRequest(weight="none"))
        self.check_request(request)

    def stored_unless_excluded(self, name: str, marker: str, excluded_by: str) -> bool:
        """Whether the checkpoint stores ``<name>.<marker>`` (the tensor that says a projection is
        quantized); a stored one that the config's ``self.exclude`` patterns name is a
        CheckpointError (``excluded_by`` says by what)."""
        stored = f"{name}.{marker}" in self.checkpoint
        if stored and match_module(self.exclude, name):
            raise CheckpointError(f"{self.checkpoint.root}: {name}: {excluded_by}, but the checkpoint stores its "
                                  f"{marker}")
        return stored

    # --- to implement -----------------------------------------------------------------------
    @classmethod
    def detect(cls, ckpt: Checkpoint) -> bool:
        raise NotImplementedError

    @classmethod
    def read_qconfig(cls, ckpt: Checkpoint) -> dict:
        return dict(ckpt.config.get("quantization_config") or {})

    @staticmethod
    def declares(ckpt: Checkpoint, method: str) -> bool:
        """Whether config.json's quantization_config declares quant_method ``method``."""
        q = ckpt.config.get("quantization_config")
        return isinstance(q, dict) and q.get("quant_method") == method

    @staticmethod
    def qconfig_where(ckpt: Checkpoint) -> str:
        """Where config.json's quantization_config is, for messages."""
        return f"{ckpt.root / 'config.json'}: quantization_config"

    def is_quantized(self, name: str, weight_name: str) -> bool:
        raise NotImplementedError

    def quant_spec(self, name: str, n: int, k: int, family: str, bias: bool) -> ProjSpec:
        raise NotImplementedError

    def quant_load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def summary(self) -> dict:
        """``describe``'s facts but format, weight_format and activation_format (DESCRIBE_KEYS)."""
        return {}

    # --- shared -----------------------------------------------------------------------------
    def check_request(self, request: QuantRequest) -> None:
        """Refuse a request the stored format cannot honour without re-quantizing."""
        if request.weight in ("declared", self.kind):
            return
        what = self.describe()
        stored = (f"{self.checkpoint.root}: the checkpoint is already quantized ({what['format']}: "
                  f"{what['weight_format']} weights); --weight-quantization {request.weight} ")
        if request.weight == "none":
            raise InputError(
                stored + "needs float weights, which it does not hold (exporting it unquantized is not "
                "supported: dequantize it with the tool that made it). Use --weight-quantization declared "
                "to export what the checkpoint stores.")
        raise InputError(
            stored + "would re-quantize weights that were already rounded (their calibration would be "
            "lost). Use --weight-quantization declared to export what the checkpoint stores, or start "
            "from the unquantized checkpoint.")

    def describe(self) -> dict:
        """The declared formats, for ``inspect`` and the manifest (keys: ``DESCRIBE_KEYS``)."""
        out = dict.fromkeys(DESCRIBE_KEYS)
        out.update(self.summary())
        out.update(format=self.format_name, weight_format=self.kind, activation_format=self.declared_activation())
        return out

    def declared_activation(self) -> str:
        return "bf16"

    def activation_scales(self) -> None:
        """The declared formats' activation scales are dynamic or stored (no calibration entry)."""
        return None

    def scalars(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        """The contract's per-tensor scalars of a stored projection (fusion.SCALARS: a few bytes
        read before the graph is made, for a fused projection's parts to agree on); the formats
        that store any override it."""
        return {}

    def spec(self, name: str, n: int, k: int, family: str, bias: bool = False,
             weight_name: str | None = None, parts: tuple[tuple[str, int], ...] = ()) -> ProjSpec:
        if parts:
            return self._fused_spec(name, n, k, family, bias, parts)
        weight_name = weight_name or f"{name}.weight"
        if weight_name == f"{name}.weight" and self.is_quantized(name, weight_name):
            spec = self.quant_spec(name, n, k, family, bias)
            if bias:
                self.checkpoint.expect(f"{name}.bias", (n,), FLOAT_DTYPES)
                spec.tensors["bias"] = ((n,), F32)
            return spec
        return self._float.spec(name, n, k, family, bias=bias, weight_name=weight_name)

    def _fused_spec(self, name: str, n: int, k: int, family: str, bias: bool,
                    parts: tuple[tuple[str, int], ...]) -> ProjSpec:
        """A fused projection (fusion.py): float parts as one float weight, stored parts as their
        tensors concatenated (``Unfusable`` when they differ in format or scalars)."""
        specs = [self.spec(p, rows, k, family, bias=bias) for p, rows in parts]
        if all(s.kind == "none" for s in specs):
            return self._float.spec(name, n, k, family, bias=bias, parts=parts)
        fused = fusion.combine(name, specs)
        fusion.check_scalars(name, {s.name: self.scalars(s) for s in specs})
        return fused

    def load(self, spec: ProjSpec) -> dict[str, torch.Tensor]:
        if spec.parts and spec.kind != "none":
            bias = "bias" in spec.tensors
            return fusion.concat(spec, [self.load(self.spec(p, rows, spec.k, spec.family, bias=bias))
                                        for p, rows in spec.parts])
        if spec.kind == "none":
            return self._float.load(spec)
        out = self.quant_load(spec)
        if "bias" in spec.tensors:
            out["bias"] = self.checkpoint.get(f"{spec.name}.bias").to(F32)
        for key, t in out.items():
            if not all_finite(t):
                raise CheckpointError(f"{self.checkpoint.root}: {spec.name}.{key} (from {spec.source}) holds NaN or infinite values")
        try:
            spec.check(out)
        except ValueError as e:  # a bug in a format module, not the user's input
            raise CheckpointError(f"{self.checkpoint.root}: {e}") from e
        return out

    # --- helpers ----------------------------------------------------------------------------
    def scalar_or_vector(self, name: str, n: int | None = None) -> torch.Size:
        """Header shape of a per-tensor ([] or [1]) or per-channel ([N] or [N, 1]) scale."""
        info = self.checkpoint.info(name)
        if info.dtype not in SCALE_DTYPES:
            raise CheckpointError(f"{info.file}: tensor {name!r}: expected a float scale, found {info.dtype}")
        shape = info.shape
        if shape in ((), (1,)) or (n is not None and shape in ((n,), (n, 1))):
            return torch.Size(shape)
        want = "[] or [1]" + (f", [{n}] or [{n}, 1]" if n is not None else "")
        raise CheckpointError(f"{info.file}: tensor {name!r}: expected shape {want}, found {list(shape)}")


def refuse_declaration(where: str, check: Check) -> None:
    """Raise ``InputError`` at ``where`` (the quantization config) with every reason of a declaration
    check, on one line."""
    if not check.ok:
        raise InputError(f"{where}: {check.message}")


def to_channel_scale(t: torch.Tensor, n: int) -> torch.Tensor:
    """A per-tensor ([] / [1]) or per-channel ([N] / [N, 1]) scale as float32 [N] (exact broadcast)."""
    t = t.to(F32).reshape(-1)
    return t.expand(n).contiguous() if t.numel() == 1 else t.contiguous()


def to_scalar(t: torch.Tensor) -> torch.Tensor:
    """A [] or [1] float tensor as float32 [1]."""
    return t.to(F32).reshape(1).contiguous()


def match_module(targets, name: str, class_name: str = "Linear") -> bool:
    """compressed-tensors / ModelOpt target matching: ``re:<regex>`` (re.match on the module
    name), a class name (``Linear``), or a module name (exact, or a suffix after a dot)."""
    return any(isinstance(t, str) and _matches_target(t, name, class_name) for t in targets or ())


def _matches_target(t: str, name: str, class_name: str) -> bool:
    if t.startswith("re:"):
        return re.match(t[3:], name) is not None
    if t == class_name or t == name or name.endswith("." + t):
        return True
    # ModelOpt's exclude_modules use glob patterns
    return "*" in t and re.fullmatch(re.escape(t).replace(r"\*", ".*"), name) is not None


def packed_int32_nibbles(t: torch.Tensor) -> torch.Tensor:
    """int32 words holding 8 nibbles (nibble i at bits 4i) -> uint8 nibbles, 8 per word, in order."""
    b = t.contiguous().view(torch.uint8)  # little-endian: byte j of a word holds nibbles 2j, 2j+1
    out = torch.stack((b & 0xF, b >> 4), dim=-1)
    return out.reshape(*t.shape[:-1], t.shape[-1] * 8)
