"""Every projection source is a ``ProjectionSource``: the float source, each declared format's and
the static-scale wrapper answer the protocol's methods, and the manifest reads what it records of a
source from them (not from which attributes a source has)."""

from __future__ import annotations

import inspect

from metrale_export.exporter import formats
from metrale_export.exporter.calibration import StaticScales
from metrale_export.exporter.formats.base import DeclaredSource
from metrale_export.exporter.manifest import weight_quantization
from metrale_export.exporter.projection_source import ProjectionSource
from metrale_export.exporter.quantization import FloatSource, QuantRequest
from metrale_export.exporter.session import open_model

PROTOCOL_METHODS = ("kind_for", "spec", "load", "describe", "activation_scales")


def test_the_float_source_is_one_and_declares_nothing(demo_checkpoint):
    session = open_model(demo_checkpoint, {"weight": "w8a8"})
    assert isinstance(session.source, FloatSource) and isinstance(session.source, ProjectionSource)
    assert session.source.describe() is None and session.source.activation_scales() is None
    wq = weight_quantization(session.request, session.source)
    assert wq["declared"] is None and wq["w8a8_weight_scales"] == "channel"


def test_static_scales_wrap_a_source_and_name_their_scales(demo_checkpoint):
    session = open_model(demo_checkpoint, {"weight": "w8a8"})
    static = StaticScales(session.source, {"model.layers.0.mlp.up_proj": 0.5}, {"data": "random:8"})
    assert isinstance(static, ProjectionSource)
    assert static.request == session.request and static.describe() is None
    assert static.activation_scales() == {"mode": "static", "calibration": {"data": "random:8"},
                                          "scales": {"model.layers.0.mlp.up_proj": 0.5}}


def test_every_declared_format_source_has_the_protocol_methods():
    classes = {c for _, c in inspect.getmembers(formats, inspect.isclass) if issubclass(c, DeclaredSource)}
    assert len(classes) >= 5, classes  # base, awq, compressed-tensors, fp8 block, gptq, modelopt
    for cls in classes:
        for name in PROTOCOL_METHODS:
            assert callable(getattr(cls, name, None)), (cls.__name__, name)
    assert DeclaredSource.activation_scales(object.__new__(DeclaredSource)) is None


def test_an_object_without_the_methods_is_not_a_source():
    class Partial:
        checkpoint = None
        request = QuantRequest()

        def spec(self, *a, **k):
            raise AssertionError

    assert not isinstance(Partial(), ProjectionSource)
