"""The names the export accepts for its options, torch-free so that the CLI can declare its options
(and answer ``--help``) without importing torch.

Invariants: ``quantization``, ``export`` and ``ops.ort`` take these from here; nothing here imports
more than the standard library (and the project's errors).
"""

from __future__ import annotations

# "declared": keep the format a quantized checkpoint stores (exporter/formats/, docs/formats.md).
WEIGHT_FORMATS = ("none", "w4a16", "w8a8", "w4a4", "declared")
# Dtypes of activations and float weights in the graph (torch dtypes of the same names).
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# The activation dtypes the ONNX Runtime reference ops run (ops.ort registers its kernels for these):
# a --dtype outside them can be exported but not compared (step 2).
REFERENCE_DTYPES = ("float16", "float32")
# Float weights -> W4A16: symmetric groups or a zero point per group (the default: a fraction of the
# symmetric error for one byte a group; benchmarks/results/quant-*.md, docs/formats.md).
W4A16_SYMMETRIC_DEFAULT = False
# --activation-scales: run-time scales per row, or static ones from calibration (calibration.py).
ACTIVATION_SCALE_MODES = ("dynamic", "static")


def parse_layers(spec: str | None, num_layers: int) -> list[int] | None:
    """'0', '0,2', '1-3' -> sorted unique layer ids within the model (None: every layer)."""
    from ..errors import InputError

    if spec is None or spec.strip() in ("", "all"):
        return None
    ids: set[int] = set()
    for part in spec.split(","):
        ids.update(_layer_range(part.strip()))
    bad = sorted(i for i in ids if not 0 <= i < num_layers)
    if bad:
        raise InputError(f"--layers: layer {bad[0]} does not exist; the model has layers 0-{num_layers - 1}")
    return sorted(ids)


def _layer_range(part: str) -> range:
    """One comma-separated part of ``--layers``: '2' -> range(2, 3), '1-3' -> range(1, 4)."""
    from ..errors import InputError

    try:
        lo, hi = (int(p) for p in part.split("-", 1)) if "-" in part else (int(part),) * 2
        if lo > hi:
            raise ValueError
    except ValueError:
        raise InputError(f"--layers: expected indices like '0', '0,2' or '1-3', found {part!r}") from None
    return range(lo, hi + 1)
