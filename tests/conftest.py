"""Shared fixtures: the demo checkpoint and its exports in every format, made once per session."""

from __future__ import annotations

import pytest

from metrale_export.exporter import demo
from metrale_export.exporter.export import ExportOptions, export
from metrale_export.exporter.quantization import QuantRequest


@pytest.fixture(scope="session")
def demo_checkpoint(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    return demo.write_demo(d)


@pytest.fixture(scope="session")
def demo_exports(tmp_path_factory, demo_checkpoint):
    """format -> export directory of the demo model (float32 graph)."""
    out = {}
    base = tmp_path_factory.mktemp("exports")
    for fmt in ("none", "w4a16", "w8a8", "w4a4"):
        out[fmt] = export(demo_checkpoint, base / fmt, ExportOptions(request=QuantRequest(weight=fmt))).out_dir
    return out


@pytest.fixture(scope="session")
def hybrid_w4a16_export(tmp_path_factory):
    """The hybrid demo (Gated DeltaNet and gated attention layers, MoE) exported in W4A16 (float32 graph)."""
    from metrale_export.exporter.demo_hybrid import write_hybrid_demo

    root = tmp_path_factory.mktemp("hybrid-w4a16")
    ckpt = write_hybrid_demo(root / "ckpt").parent
    return export(ckpt, root / "onnx", ExportOptions(request=QuantRequest(weight="w4a16"))).out_dir
