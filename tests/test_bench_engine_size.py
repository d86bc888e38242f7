"""benchmarks/bench_engine_size.py's reading of an engine file (the numbers docs/engines.md cites)."""

from __future__ import annotations

from benchmarks.bench_engine_size import VARIANTS, content


def test_content_counts_the_kernels_and_the_text_share():
    text = b'extern "C" __global__ void k0() {}\n' * 3 + b"__global__ void k1();\n"
    binary = bytes(range(128, 256)) * 2  # no printable byte
    got = content(text + binary)
    assert got["bytes"] == len(text) + 256
    assert got["global_functions"] == 4
    assert got["printable"] == round(len(text) / (len(text) + 256), 4)
    assert got["xz_bytes"] < got["bytes"] and got["zlib_bytes"] < got["bytes"] + 64


def test_the_default_variant_changes_nothing():
    assert VARIANTS["default"] == {}
    assert all(isinstance(spec, dict) for spec in VARIANTS.values())
