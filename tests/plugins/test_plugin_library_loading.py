"""TensorRT's own plugin-library loader accepts libmetrale_plugins.so (no GPU needed).

The library is loaded through ``IPluginRegistry.load_library`` of whichever TensorRT Python
bindings are importable (``tensorrt``, else TensorRT-RTX's ``tensorrt_rtx_bindings``), which looks
up ``getCreators``/``setLoggerFinder`` as ``trtexec --dynamicPlugins`` and Polygraphy do; then each
creator must be found by (op type, its plugin version, "metrale") and create a plugin from ONNX-like fields.

Note: TensorRT-RTX has no plugin layers; its ONNX parser finds our creator by the node's domain and
creates the plugin, and then the process terminates. Graphs with metrale nodes are for TensorRT
only (the qdq lowering is the TensorRT-RTX path), so no parse is attempted here.

Skipped, with the reason, without a built library (cmake with TensorRT headers; not part of CI,
which has no headers) or without TensorRT bindings.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest

from metrale_export import contract

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("METRALE_PLUGIN_BUILD", REPO / "build" / "plugins-trt"))
LIBRARY = BUILD / "libmetrale_plugins.so"

FIELDS = {
    "W4A16Proj": {"n": 64, "k": 256, "group_size": 128, "has_zero_point": 0, "activation_format": "bf16",
                  "has_bias": 1, "family": "ffn", "name": "layers.0.mlp.down_proj"},
    "W8A8Proj": {"n": 64, "k": 256, "weight_scale_granularity": "block128", "activation_format": "fp8",
                 "activation_scale_granularity": "row", "has_bias": 0, "family": "attn",
                 "name": "layers.0.self_attn.q_proj"},
    "W4A4Proj": {"n": 64, "k": 256, "activation_format": "nvfp4", "has_input_scale": 0, "has_bias": 0,
                 "family": "moe", "name": "layers.0.mlp.experts.0.up_proj"},
    "W4A16MoEProj": {"n": 64, "k": 256, "num_experts": 8, "top_k": 2, "combine": 0, "group_size": 128,
                     "has_zero_point": 0, "activation_format": "bf16", "has_bias": 0, "family": "moe",
                     "name": "layers.0.mlp.experts.gate_proj"},
    "W8A8MoEProj": {"n": 64, "k": 256, "num_experts": 8, "top_k": 2, "combine": 1,
                    "weight_scale_granularity": "channel", "activation_format": "fp8",
                    "activation_scale_granularity": "row", "has_bias": 0, "family": "moe",
                    "name": "layers.0.mlp.experts.down_proj"},
    "W4A4MoEProj": {"n": 64, "k": 256, "num_experts": 8, "top_k": 2, "combine": 0, "activation_format": "nvfp4",
                    "has_input_scale": 1, "has_bias": 0, "family": "moe", "name": "layers.0.mlp.experts.up_proj"},
}


@pytest.fixture(scope="module")
def trt():
    if not LIBRARY.exists():
        pytest.skip(f"{LIBRARY} not built (cmake -S plugins -B {BUILD} -DTensorRT_INCLUDE_DIR=...)")
    for name in ("tensorrt", "tensorrt_rtx_bindings"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    pytest.skip("no TensorRT Python bindings (tensorrt or tensorrt_rtx_bindings)")


@pytest.fixture(scope="module")
def registry(trt):
    reg = trt.get_plugin_registry()
    handle = reg.load_library(str(LIBRARY))
    assert handle is not None, f"{trt.__name__} could not load {LIBRARY}"
    return reg


_KEEP = []  # the fields' arrays: the bindings may keep only their addresses, so they must outlive the call


def _fields(trt, values: dict):
    fields = []
    for name, value in values.items():
        data = np.array([value], np.int32) if isinstance(value, int) else np.frombuffer(value.encode(), np.int8)
        _KEEP.append(data)
        kind = trt.PluginFieldType.INT32 if isinstance(value, int) else trt.PluginFieldType.CHAR
        fields.append(trt.PluginField(name, data, kind))
    return trt.PluginFieldCollection(fields)


@pytest.mark.parametrize("op", sorted(FIELDS))
def test_creator_is_registered_and_creates_plugins(trt, registry, op):
    version = str(contract.op(op).version)  # W4A16Proj: "2" (op version 2)
    creator = registry.get_creator(op, version, contract.DOMAIN)
    assert creator is not None, f"{op}: no creator registered under namespace 'metrale', version {version!r}"
    advertised = {f.name: f.type for f in creator.field_names}
    expected = {name: trt.PluginFieldType.INT32 if isinstance(v, int) else trt.PluginFieldType.CHAR
                for name, v in FIELDS[op].items()}
    assert advertised == expected
    plugin = creator.create_plugin("layer", _fields(trt, FIELDS[op]), trt.TensorRTPhase.BUILD)
    assert plugin is not None


def test_bad_fields_are_refused_not_fatal(trt, registry):
    creator = registry.get_creator("W4A16Proj", "2", contract.DOMAIN)
    bad = dict(FIELDS["W4A16Proj"], group_size=96)
    assert creator.create_plugin("layer", _fields(trt, bad), trt.TensorRTPhase.BUILD) is None
    # A graph of a retired version (W4A16: float32 scales; W8A8Proj 1 and 2: exact f16 products)
    # finds its retired creator, which refuses every plugin.
    for op, version in (("W4A16Proj", "1"), ("W4A16MoEProj", "1"), ("W8A8Proj", "1"), ("W8A8Proj", "2")):
        old = registry.get_creator(op, version, contract.DOMAIN)
        assert old is not None, (op, version)
        assert old.create_plugin("layer", _fields(trt, FIELDS[op]), trt.TensorRTPhase.BUILD) is None, (op, version)
    # A grouped op with top_k above num_experts (docs/ops.md: exit 2 at export; refused here too).
    creator = registry.get_creator("W8A8MoEProj", "1", contract.DOMAIN)
    bad = dict(FIELDS["W8A8MoEProj"], top_k=9)
    assert creator.create_plugin("layer", _fields(trt, bad), trt.TensorRTPhase.BUILD) is None
