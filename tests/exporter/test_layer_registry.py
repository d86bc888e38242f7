"""The layer registry: every family config.py accepts has a decoder-layer class, importing a layer
module registers nothing, and an unknown family is refused with the known ones named."""

from __future__ import annotations

import subprocess
import sys

import pytest

from metrale_export.errors import ConfigError
from metrale_export.exporter.layers import registry


def test_every_family_maps_to_a_layer_class_with_the_protocol():
    for family, cls in registry.LAYERS.items():
        assert registry.layer_builder(family) is cls
        for method in ("plan", "plain_tensors", "state_specs", "forward"):
            assert callable(getattr(cls, method, None)), (family, method)


def test_unknown_family_is_refused():
    with pytest.raises(ConfigError, match="no decoder layer for the model family 'llama'; known: qwen3"):
        registry.layer_builder("llama")


def test_layer_modules_have_no_import_side_effects():
    code = ("import metrale_export.exporter.layers.moe as m, metrale_export.exporter.layers.qwen3_next as n, "
            "sys; print('metrale_export.exporter.layers.registry' in sys.modules, "
            "'metrale_export.exporter.layers.model' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"], out.stdout
