"""The quantization options as one table: for each field of ``QuantRequest`` its default, its
allowed values (from the op contract where the contract has them), its command-line flag and help,
and its manifest key, from which the Click options (cli/options.py), the request the CLI builds
(cli/export.py), the request's own check (quantization.py), the manifest's ``weight_quantization``
(manifest.py) and its inverse (session.request_from_manifest) are all made.

Torch-free (the CLI declares its options, and answers ``--help``, without importing torch).

Invariants:
- adding a quantization option is adding a ``QuantOption`` here and its field to ``QuantRequest``
  (tests/exporter/test_quant_options.py fails when the two differ);
- the manifest entry of a request read back gives the same request (``from_manifest`` inverts
  ``to_manifest``); a key an older manifest lacks reads as the option's default;
- an option that applies to some weight formats only (``formats``) is recorded as None for the
  others, or left out where ``absent_elsewhere`` (so the other formats' manifests keep their bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import GROUP_SIZES, MOE_LAYOUTS, STATIC_ACTIVATION_SCALE, W8A8
from ..errors import OK, Check, all_of
from .names import W4A16_SYMMETRIC_DEFAULT, WEIGHT_FORMATS

W8A8_SCALES = W8A8.attribute("weight_scale_granularity")
W8A8_ACT_SCALES = W8A8.attribute("activation_scale_granularity")
# The dynamic ones (the static per-tensor scale is --activation-scales static's, not a request field).
W8A8_DYNAMIC_ACT_SCALES = tuple(v for v in W8A8_ACT_SCALES.values if v != STATIC_ACTIVATION_SCALE)
# --weight-quantization's own choice beyond the formats: the checkpoint's declared format, else w4a16
# (session.resolve_weight turns it into one of WEIGHT_FORMATS before a request is made).
AUTO = "auto"


@dataclass(frozen=True)
class QuantOption:
    """One field of ``QuantRequest`` everywhere it appears.

    ``flag``: the Click declaration ("--group-size", "--asymmetric/--symmetric", a lone flag such as
    "--no-scale-search" is a boolean); ``param``: the Click parameter name; ``negated``: the flag
    holds ``not field`` (--asymmetric for ``symmetric``, --no-scale-search for ``scale_search``);
    ``manifest_negated`` likewise for the manifest value. ``choices`` None: a boolean."""

    field: str
    default: object
    choices: tuple | None
    flag: str
    param: str
    help: str
    manifest_key: str
    negated: bool = False
    manifest_negated: bool = False
    formats: tuple[str, ...] | None = None  # the weight formats it applies to (None: every one)
    absent_elsewhere: bool = False  # outside ``formats`` the manifest leaves the key out, not None
    cli_choices: tuple | None = None  # the CLI's choices where they differ (--weight-quantization auto)
    cli_default: object = None  # the CLI's default where it differs (None: the request's)
    # The value a manifest that lacks the key stands for, where that is not the default (an option
    # whose default changes what older exports did: they were made without it).
    absent: object = None

    @property
    def flag_name(self) -> str:
        """The flag as messages name it (the first of an on/off pair)."""
        return self.flag.split("/")[0]

    def check(self, value) -> Check:
        """Whether ``value`` is one of the option's choices (a refusal: one line)."""
        if self.choices is None or value in self.choices:
            return OK
        return Check.of([f"{self.flag_name}: expected one of {', '.join(map(str, self.choices))}, found {value!r}"])

    def from_cli(self, params: dict):
        """The request field's value from Click's ``params`` (absent: the request's default)."""
        if self.param not in params:
            return self.default
        value = params[self.param]
        if self.negated:
            return not value
        return int(value) if isinstance(self.default, int) and not isinstance(self.default, bool) else value

    def applies_to(self, weight: str) -> bool:
        return self.formats is None or weight in self.formats

    def to_manifest(self, request) -> dict:
        """This option's entry of the manifest's ``weight_quantization`` for ``request``."""
        if not self.applies_to(request.weight):
            return {} if self.absent_elsewhere else {self.manifest_key: None}
        value = getattr(request, self.field)
        return {self.manifest_key: (not value) if self.manifest_negated else value}

    def from_manifest(self, wq: dict):
        """The request field's value from a manifest's ``weight_quantization`` (None or absent: the
        default: the option did not apply, or the manifest predates it)."""
        if self.manifest_key not in wq and self.absent is not None:
            return self.absent
        value = wq.get(self.manifest_key)
        if value is None:
            return self.default
        return (not value) if self.manifest_negated else value



OPTIONS: tuple[QuantOption, ...] = (
    QuantOption("weight", "none", WEIGHT_FORMATS, "--weight-quantization", "weight",
                "Format of every quantized linear projection. auto: what a quantized checkpoint declares, else "
                "w4a16; declared: only what the checkpoint declares; none: keep float.",
                "format", cli_choices=(AUTO, *WEIGHT_FORMATS), cli_default=AUTO),
    QuantOption("group_size", 128, GROUP_SIZES, "--group-size", "group_size", "W4A16 group size along K.",
                "group_size", formats=("w4a16",), cli_choices=tuple(str(g) for g in GROUP_SIZES)),
    QuantOption("symmetric", W4A16_SYMMETRIC_DEFAULT, None, "--asymmetric/--symmetric", "asymmetric",
                "W4A16 from float weights: a zero point per group (one byte each) or symmetric groups (zero "
                "point 8, the full [-8, 7] grid).",
                "asymmetric", negated=True, manifest_negated=True, formats=("w4a16",)),
    # Search each W4A16 group's scale (clipping range) and each NVFP4 block's e4m3 scale (ops/);
    # False: round to nearest. Recorded for W4A16 / W4A4 only (other formats' manifests keep their bytes).
    QuantOption("scale_search", True, None, "--no-scale-search", "no_scale_search",
                "Plain round-to-nearest W4A16 group scales (clipping ranges) and NVFP4 block scales (default: "
                "search each for the lowest squared error).",
                "scale_search", negated=True, formats=("w4a16", "w4a4"), absent_elsewhere=True),
    QuantOption("w8a8_weight_scales", W8A8_SCALES.default, W8A8_SCALES.values, "--w8a8-weight-scales",
                "w8a8_weight_scales", "W8A8 weight scales: per output channel or 128x128 blocks.",
                "w8a8_weight_scales", formats=("w8a8",)),
    QuantOption("w8a8_activation_scales", W8A8_ACT_SCALES.default, W8A8_DYNAMIC_ACT_SCALES,
                "--w8a8-activation-scales", "w8a8_activation_scales",
                "W8A8 dynamic activation scales: per row or per (row, 128).",
                "w8a8_activation_scales", formats=("w8a8",)),
    QuantOption("quantize_lm_head", False, None, "--quantize-lm-head", "quantize_lm_head",
                "Quantize lm_head too (default: keep it float).", "lm_head"),
    # Always recorded (tests/support/export_hashes.json records it); older manifests lack it: grouped.
    QuantOption("moe_experts", MOE_LAYOUTS[0], MOE_LAYOUTS, "--moe-experts", "moe_experts",
                "Quantized MoE experts: grouped-expert ops reading only the routed experts, or one projection "
                "per expert run on every row (what the qdq lowering can express).", "moe_experts"),
    # Always recorded; older manifests lack it, and their exports are unfused (exporter/fusion.py).
    QuantOption("fuse_projections", True, None, "--fuse-projections/--no-fuse-projections", "fuse_projections",
                "Export q|k|v and gate|up as one op each (fewer launches, one activation read; bits differ "
                "from the unfused ops', docs/ops.md) or one op per checkpoint projection.",
                "fuse_projections", absent=False),
)
BY_FIELD = {o.field: o for o in OPTIONS}


def request_fields_from_cli(params: dict) -> dict:
    """QuantRequest's keyword arguments from Click's ``params`` (weight may still be "auto")."""
    return {o.field: o.from_cli(params) for o in OPTIONS}


def manifest_entry(request) -> dict:
    """The request's part of the manifest's ``weight_quantization`` (manifest.weight_quantization
    adds the declared format)."""
    out: dict = {}
    for o in OPTIONS:
        out.update(o.to_manifest(request))
    return out


def request_fields_from_manifest(wq: dict) -> dict:
    """QuantRequest's keyword arguments from a manifest's ``weight_quantization`` (its format is
    required: a manifest always records it)."""
    fields = {o.field: o.from_manifest(wq) for o in OPTIONS}
    fields["weight"] = wq["format"]
    return fields


def check(request) -> Check:
    """Every field of ``request`` outside its option's choices, a reason each."""
    return all_of(o.check(getattr(request, o.field)) for o in OPTIONS)
