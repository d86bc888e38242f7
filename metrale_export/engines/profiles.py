"""Row-count profiles: parse ``--profiles``, pick the profile of an M, and the shapes of each engine.

One engine is built per row range ``[lo, hi]`` of M = batch * seq (the rows every metrale op sees).
Inside that engine two TensorRT optimization profiles cover the range: *decode* (batch in [lo, hi],
seq = 1) and *prefill* (batch = 1, seq in [lo, hi]); the KV-cache length ``past`` runs from 0 to
``max_context`` in both. A graph that takes rows directly (an input with one dynamic dimension, as
the synthetic test graphs ``x [M, K]``) gets one profile on that dimension.

Invariants:
- ranges are positive, each ``lo <= hi``, sorted, disjoint, and ``hi <= max_rows``;
- every function here is pure (no TensorRT, no files): the build turns ``ProfileShapes`` into
  Polygraphy ``Profile`` objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

DEFAULT_PROFILES = "1,2-8,9-32,33-128,129-4096"
DEFAULT_MAX_CONTEXT = 4096

# The dynamic dimensions of the exported model's inputs (docs/engines.md): input_ids and
# position_ids [batch, seq], the KV cache [batch, kv_heads, past, head_dim], GDN's conv state
# [batch, conv_dim, kernel - 1] and recurrent state [batch, heads, dk, dv]: every state input is
# placed by its dimension names, whatever the layer kind.
MODEL_DIMS = ("batch", "seq", "past")
_TOKEN_INPUTS = ("input_ids", "position_ids")


_INT32_MAX = 2**31 - 1  # TensorRT dimensions are int32


class ProfileError(InputError):
    """A ``--profiles`` spec or a row count that no profile covers."""


class UsageConflict(InputError):
    """Options that cannot go together; ``param`` names the option to blame (the CLI's hint)."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def resolve_max_context(max_context: int | None, model_max: int | None, where: Path) -> int:
    """The longest context the engines take: the one asked for, within the model's positions, or
    by default ``min(DEFAULT_MAX_CONTEXT, model_max)``."""
    if max_context is None:
        return min(DEFAULT_MAX_CONTEXT, model_max) if model_max else DEFAULT_MAX_CONTEXT
    if model_max and max_context > model_max:
        raise UsageConflict(
            f"{max_context} tokens is more than the model's max_position_embeddings "
            f"({model_max}, {where}); lower --max-context",
            "--max-context",
        )
    return max_context


@dataclass(frozen=True, order=True)
class RowRange:
    """Rows M = batch * seq from ``lo`` to ``hi`` inclusive: one engine."""

    lo: int
    hi: int

    def __contains__(self, m: int) -> bool:
        return self.lo <= m <= self.hi

    @property
    def label(self) -> str:
        """``"1"`` or ``"2-8"``: the spec text, also used in engine file names."""
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"

    def __str__(self) -> str:
        return f"rows {self.label}"


def parse_profiles(spec: str, max_rows: int | None = None, model_max: int | None = None) -> tuple[RowRange, ...]:
    """Parse ``"1,2-8,9-32"`` into row ranges; raise ``ProfileError`` naming the offending item.

    ``max_rows`` is the engines' limit on M (for prefill: the longest sequence one engine accepts,
    the --max-context); ``None`` skips that check. ``model_max`` (the model's
    max_position_embeddings, the most --max-context accepts) keeps the hint to values that are taken.
    """
    if not spec or not spec.strip():
        raise ProfileError("--profiles: expected ranges like '1,2-8,9-32', found an empty value")
    ranges: list[RowRange] = []
    for item in spec.split(","):
        text = item.strip()
        r = _parse_range(text, spec)
        _check_limits(r, text, max_rows, model_max)
        if ranges:
            _check_after(r, ranges[-1], text, spec)
        ranges.append(r)
    return tuple(ranges)


def _parse_range(text: str, spec: str) -> RowRange:
    """One ``N`` or ``LO-HI`` item of ``spec``, refused when it is not one or is empty."""
    match = re.fullmatch(r"(\d+)(?:\s*-\s*(\d+))?", text)
    if not match:
        raise ProfileError(
            f"--profiles: expected N or LO-HI with positive integers, found {text!r} in {spec!r}"
        )
    lo = int(match.group(1))
    hi = int(match.group(2)) if match.group(2) else lo
    if lo < 1:
        raise ProfileError(f"--profiles: rows start at 1, found {text!r} in {spec!r}")
    if hi < lo:
        raise ProfileError(
            f"--profiles: range {text!r} ends before it starts (expected LO <= HI) in {spec!r}"
        )
    return RowRange(lo, hi)


def _check_limits(r: RowRange, text: str, max_rows: int | None, model_max: int | None) -> None:
    """Refuse a range past TensorRT's largest dimension or past the engines' limit on M."""
    if r.hi > _INT32_MAX:
        raise ProfileError(
            f"--profiles: range {text!r} goes past {_INT32_MAX} rows, TensorRT's largest dimension"
        )
    if max_rows is not None and r.hi > max_rows:
        raise ProfileError(f"--profiles: range {text!r} goes past the model's limit of {max_rows} rows "
                           f"(hint: {_limit_hint(r.hi, max_rows, model_max)})")


def _check_after(r: RowRange, prev: RowRange, text: str, spec: str) -> None:
    """Refuse a range that does not start after the one before it."""
    if r.lo <= prev.hi:
        kind = "overlaps" if r.lo >= prev.lo else "comes before"
        raise ProfileError(
            f"--profiles: range {text!r} {kind} {prev.label!r}; expected sorted, disjoint "
            f"ranges (the next one starting at {prev.hi + 1} or later) in {spec!r}"
        )


def _limit_hint(hi: int, max_rows: int, model_max: int | None) -> str:
    """What to change for a range ending at ``hi`` past ``max_rows``: --max-context only where the
    model's positions allow it (resolve_max_context refuses more than ``model_max``)."""
    if model_max is None or hi <= model_max:
        return f"raise --max-context to {hi} or end the last range at {max_rows}"
    if max_rows < model_max:
        return (f"end the last range at {max_rows}, or at most at {model_max} (the model's "
                f"max_position_embeddings) with --max-context {model_max}")
    return f"end the last range at {max_rows}, the model's max_position_embeddings"


def fit_profiles(ranges: tuple[RowRange, ...], max_rows: int) -> tuple[RowRange, ...]:
    """The default profiles cut to a model's limit: a range past ``max_rows`` ends there, and a
    range that starts past it is dropped (used only when the user gave no ``--profiles``)."""
    return tuple(RowRange(r.lo, min(r.hi, max_rows)) for r in ranges if r.lo <= max_rows)


def format_profiles(ranges: tuple[RowRange, ...]) -> str:
    """The canonical spec of parsed ranges (``parse_profiles(format_profiles(r)) == r``)."""
    return ",".join(r.label for r in ranges)


def profile_for(m: int, ranges: tuple[RowRange, ...]) -> tuple[RowRange | None, str]:
    """The range whose engine serves ``m`` rows, or ``None`` with the reason."""
    if m < 1:
        return None, f"{m} rows: expected at least 1"
    for r in ranges:
        if m in r:
            return r, f"{m} rows fall in {r}"
    return None, _uncovered(m, ranges)


def _uncovered(m: int, ranges: tuple[RowRange, ...]) -> str:
    """Why no range of ``ranges`` serves ``m`` (at least 1) rows, and what to do."""
    below = [r for r in ranges if r.hi < m]
    above = [r for r in ranges if r.lo > m]
    if not above:
        last = ranges[-1].hi if ranges else 0
        return f"{m} rows: more than the largest profile ({last}); split the batch"
    near = f"between {below[-1].label} and {above[0].label}" if below else f"below {above[0].label}"
    return f"{m} rows: no profile covers them ({near}); add a range"


# --- TensorRT optimization profiles -----------------------------------------------------------

Dim = int | str | None  # a static size, a symbolic name, or unknown


@dataclass(frozen=True)
class ProfileShapes:
    """One TensorRT optimization profile: input name -> (min, opt, max) shapes."""

    name: str  # "decode", "prefill" or "rows"
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "shapes": {
                k: {"min": list(v[0]), "opt": list(v[1]), "max": list(v[2])}
                for k, v in self.shapes.items()
            },
        }


def optimization_profiles(
    inputs: dict[str, list[Dim]], rows: RowRange, max_context: int = DEFAULT_MAX_CONTEXT
) -> tuple[ProfileShapes, ...]:
    """The optimization profiles of the engine for ``rows``, from the graph's input shapes.

    Model graphs (``input_ids`` present): decode and prefill as described in the module docstring;
    they coincide when ``rows`` is the single value 1, and only one is returned then. Other graphs:
    every input must have exactly one dynamic dimension, taken to be M.
    """
    if max_context < 1:
        raise ProfileError(f"--max-context: expected a positive number, found {max_context}")
    if "input_ids" in inputs:
        return _model_profiles(inputs, rows, max_context)
    shapes = {}
    for name, shape in inputs.items():
        dynamic = [i for i, d in enumerate(shape) if not (isinstance(d, int) and d >= 0)]
        if len(dynamic) != 1:
            raise ProfileError(
                f"input {name}: shape {shape}: expected exactly one dynamic dimension (the rows M) "
                f"in a graph without input_ids, found {len(dynamic)}"
            )
        lo, opt, hi = (list(shape) for _ in range(3))
        lo[dynamic[0]], opt[dynamic[0]], hi[dynamic[0]] = rows.lo, rows.hi, rows.hi
        shapes[name] = (tuple(lo), tuple(opt), tuple(hi))
    return (ProfileShapes("rows", shapes),)


def _model_profiles(inputs, rows: RowRange, max_context: int) -> tuple[ProfileShapes, ...]:
    # (batch, seq, past) as (min, opt, max) per profile. Kernels are tuned at opt: the top of the
    # range for the rows, half the context for decode's cache, an empty cache for prefill.
    plans = {
        "decode": ((rows.lo, rows.hi, rows.hi), (1, 1, 1), (0, max_context // 2, max_context)),
        "prefill": ((1, 1, 1), (rows.lo, rows.hi, rows.hi), (0, 0, max_context)),
    }
    if rows.hi > max_context:
        raise ProfileError(
            f"{rows}: a prefill of {rows.hi} tokens is longer than --max-context {max_context}"
        )
    names = ("decode",) if rows.hi == 1 else ("decode", "prefill")
    out = []
    for pname in names:
        batch, seq, past = plans[pname]
        sizes = {"batch": batch, "seq": seq, "past": past}
        shapes = {name: _input_shapes(name, shape, sizes) for name, shape in inputs.items()}
        out.append(ProfileShapes(pname, shapes))
    return tuple(out)


def _input_shapes(name: str, shape: list[Dim], sizes: dict) -> tuple[tuple[int, ...], ...]:
    """The (min, opt, max) shapes of model input ``name`` for one profile's ``sizes`` of the named
    dimensions."""
    dims = []
    for i, d in enumerate(shape):
        if isinstance(d, int) and d >= 0:
            dims.append((d, d, d))
        elif d in sizes:
            dims.append(sizes[d])
        else:
            raise ProfileError(
                f"input {name}: dimension {i} of {shape} is {d!r}; the exported model "
                f"interface names only {', '.join(MODEL_DIMS)} (and static sizes), so it "
                f"cannot be placed in a profile"
            )
    if name in _TOKEN_INPUTS and shape[:2] != ["batch", "seq"]:
        raise ProfileError(f"input {name}: expected [batch, seq], found {shape}")
    return tuple(tuple(dim[j] for dim in dims) for j in range(3))
