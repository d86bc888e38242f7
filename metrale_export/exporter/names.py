"""The names the export accepts for its options, torch-free so that the CLI can declare its options
(and answer ``--help``) without importing torch.

Invariants: ``quantization`` and ``export`` take these tuples from here; nothing here imports more
than the standard library.
"""

from __future__ import annotations

# "declared": keep the format a quantized checkpoint stores (exporter/formats/, docs/formats.md).
WEIGHT_FORMATS = ("none", "w4a16", "w8a8", "w4a4", "declared")
# Dtypes of activations and float weights in the graph (torch dtypes of the same names).
DTYPE_NAMES = ("float32", "float16", "bfloat16")
# Float weights -> W4A16: symmetric groups or a zero point per group (the default: a fraction of the
# symmetric error for one byte a group; benchmarks/results/quant-*.md, docs/formats.md).
W4A16_SYMMETRIC_DEFAULT = False
