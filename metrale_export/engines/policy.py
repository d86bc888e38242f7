"""The ``--activation-quantization`` policy: which activation format each projection runs per engine.

Pure functions, no TensorRT. ``parse_policy`` reads the option; ``choose_format`` returns, for one
op (type, family, declared format) in one row range, a format or a refusal with the reason;
``row_invariance`` says whether the policy keeps the bitwise row-invariance promise.

Invariants:
- a chosen format is always in the op contract's table (docs/ops.md, *Activation formats*);
- fixed, per-family and declared policies choose independently of the row range, so every engine
  of a build runs the same formats (the precondition of row invariance); only ``adaptive`` looks at
  the range, and it says it gives up the promise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import contract
from ..errors import InputError
from .profiles import RowRange

FORMATS = contract.ACTIVATION_FORMATS
FAMILIES = contract.FAMILIES
# The policy chooses activation formats for the quantized projections only (the other metrale ops,
# norms, attention, the router, run their own fixed arithmetic).
_PROJECTIONS = contract.projections()
OP_TYPES = tuple(_PROJECTIONS)
DENSE_OP_TYPES = tuple(t for t, s in _PROJECTIONS.items() if s.grouped_of is None)
# --float-weights: how an engine stores the export's float weights (engines/weights.py):
# "checkpoint" in bfloat16 where every value is exact in it, "float32" as exported.
FLOAT_WEIGHTS = ("checkpoint", "float32")
# --engine-weights: where an engine's weights live (docs/engines.md, "Engine weights"): "shared",
# engine inputs bound to one copy of the weights file; "stripped", left out of the plan (REFIT +
# STRIP_PLAN) and refitted from the weights file; "embedded", a copy in every engine.
ENGINE_WEIGHTS = ("shared", "stripped", "embedded")
# The grouped-expert ops run the table of their weight format's dense op (docs/ops.md).
MOE_OP_TYPES = tuple(t for t, s in _PROJECTIONS.items() if s.grouped_of is not None)

# docs/ops.md, "Activation formats": the formats each op type (named by its weight format) runs.
ALLOWED = {t: spec.activation_formats for t, spec in _PROJECTIONS.items()}
_WEIGHTS = {t: spec.weights for t, spec in _PROJECTIONS.items()}
# The op's own quantized activation format (the contract's default), used by ``adaptive``.
NATIVE = {t: spec.default_activation for t, spec in _PROJECTIONS.items()}

# adaptive: ranges whose largest M is at most this run bf16 activations (decode is memory bound:
# weight traffic dominates and quantizing activations only adds work); larger ranges run the op's
# native quantized format (prefill is compute bound: FP8/FP4 tensor cores pay off).
ADAPTIVE_BF16_MAX_ROWS = 32


class PolicyError(InputError):
    """An ``--activation-quantization`` spec that cannot be read, or a format an op cannot run."""


@dataclass(frozen=True)
class Policy:
    """A parsed ``--activation-quantization``: kind is adaptive, declared, fixed or per_family."""

    kind: str
    fixed: str | None = None
    per_family: dict[str, str] = field(default_factory=dict)
    spec: str = ""

    def describe(self) -> str:
        return self.spec or self.kind


@dataclass(frozen=True)
class Choice:
    """The format an op runs in one engine, or ``None`` with the reason it cannot run."""

    format: str | None
    reason: str

    @property
    def ok(self) -> bool:
        return self.format is not None


def parse_policy(spec: str) -> Policy:
    """``adaptive``, ``declared``, ``bf16|fp8|nvfp4``, or ``ffn=fp8,attn=bf16,...``."""
    text = (spec or "").strip()
    if text in ("adaptive", "declared"):
        return Policy(text, spec=text)
    if text in FORMATS:
        return Policy("fixed", fixed=text, spec=text)
    if "=" not in text:
        raise PolicyError(
            f"--activation-quantization: expected adaptive, declared, one of {', '.join(FORMATS)}, "
            f"or FAMILY=FORMAT pairs like 'ffn=fp8,attn=bf16'; found {spec!r}"
        )
    per_family: dict[str, str] = {}
    for item in text.split(","):
        family, _, fmt = (s.strip() for s in item.partition("="))
        if family not in FAMILIES:
            raise PolicyError(
                f"--activation-quantization: unknown family {family!r} in {spec!r}; "
                f"expected one of {', '.join(FAMILIES)}"
            )
        if fmt not in FORMATS:
            raise PolicyError(
                f"--activation-quantization: {family}={fmt!r} in {spec!r}: expected a format out of "
                f"{', '.join(FORMATS)}"
            )
        if family in per_family:
            raise PolicyError(f"--activation-quantization: family {family!r} given twice in {spec!r}")
        per_family[family] = fmt
    return Policy("per_family", per_family=per_family, spec=text)


def _check(op_type: str, fmt: str, why: str) -> Choice:
    if fmt in ALLOWED[op_type]:
        return Choice(fmt, why)
    return Choice(
        None,
        f"{fmt} activations with {_WEIGHTS[op_type]} weights ({op_type}) are not in the op "
        f"contract's table (docs/ops.md, Activation formats): {op_type} runs "
        f"{' or '.join(ALLOWED[op_type])} ({why})",
    )


def choose_format(
    policy: Policy, op_type: str, family: str, declared: str, rows: RowRange
) -> Choice:
    """The activation format of one op in the engine for ``rows``, or a refusal with the reason."""
    if op_type not in ALLOWED:
        return Choice(None, f"unknown op type {op_type!r}; expected one of {', '.join(OP_TYPES)}")
    if policy.kind == "declared":
        if declared not in FORMATS:
            return Choice(None, f"the export declares activation_format={declared!r}, not a format")
        return _check(op_type, declared, "as the export declares")
    if policy.kind == "fixed":
        return _check(op_type, policy.fixed, f"fixed {policy.fixed}")
    if policy.kind == "per_family":
        if family not in policy.per_family:
            if declared not in FORMATS:
                return Choice(None, f"the export declares activation_format={declared!r}, not a format")
            return _check(op_type, declared, f"family {family!r} not named: as the export declares")
        fmt = policy.per_family[family]
        return _check(op_type, fmt, f"{family}={fmt}")
    if policy.kind == "adaptive":
        if rows.hi <= ADAPTIVE_BF16_MAX_ROWS:
            return Choice("bf16", f"adaptive: {rows} is at most {ADAPTIVE_BF16_MAX_ROWS} rows: bf16")
        fmt = NATIVE[op_type]
        return Choice(
            fmt, f"adaptive: {rows} exceeds {ADAPTIVE_BF16_MAX_ROWS} rows: {op_type}'s native {fmt}"
        )
    return Choice(None, f"unknown policy kind {policy.kind!r}")


def row_invariance(policy: Policy, lowering: str = "plugin") -> tuple[bool, str]:
    """Whether the engines of a build promise bitwise row invariance, and why (not)."""
    if lowering == "qdq":
        return False, (
            "the qdq lowering leaves kernel choice to TensorRT, whose GEMM tactics may change the "
            "accumulation order with M; only the plugin lowering promises row invariance"
        )
    if policy.kind == "adaptive":
        return False, (
            "adaptive picks formats per row range, so a row's result depends on the engine that "
            "serves its batch"
        )
    return True, f"{policy.describe()}: every engine runs the same format per op"


def choose_formats(policy: Policy, ops, rows: RowRange) -> tuple[dict[str, str], list]:
    """Formats of all ops (``OpInfo``-like: key, op_type, family, activation_format) for one range.

    Returns (key -> format, refusals as (op, reason)).
    """
    formats: dict[str, str] = {}
    refusals: list = []
    for op in ops:
        choice = choose_format(policy, op.op_type, op.family, op.activation_format, rows)
        if choice.ok:
            formats[op.key] = choice.format
        else:
            refusals.append((op, choice.reason))
    return formats, refusals


def describe_refusals(refusals: dict, ranges) -> list[str]:
    """One line per refused op and reason: ``{(op, reason): [RowRange, ...]}`` -> messages."""
    lines = []
    for (op, reason), where in refusals.items():
        span = "every profile" if len(where) == len(ranges) else ", ".join(str(r) for r in where)
        lines.append(f"{op.key} ({op.op_type}, family {op.family}; {span}): {reason}")
    return lines
