"""The ``metrale`` op contract as data: the one home of every fact docs/ops.md states about the ops.

Torch-free and onnx-free (plain Python), so every floor imports it: the ONNX schemas and
translations, the torch and ONNX Runtime reference ops, the CUDA wrapper's argument codes, the
engine policy and lowering, the projection specs and the format readers all derive from it, and
``python -m metrale_export.contract --write`` exports it as ``plugins/contract.json`` and generates
the C++ header ``plugins/include/metrale/contract.h`` (contract/header.py), from which the kernels'
enums and constants, the plugins' field tables and the conformance harness read it.

Model: TensorRT's ``plugin/*/*_PluginConfig.yaml`` (inputs, attribute types and options as data).

The package, one concern a module (consumers import the names from here):
- ``numerics``: the domain, the families, the activation formats and x dtypes, the scalar formats
  and blocks, what the CUDA kernels serve beyond the contract;
- ``schema``: ``Input``, ``Attribute``, ``Output``, ``OpSpec`` (the shape of a spec);
- ``ops``: every ``OpSpec`` (``OPS``) and the numeric facts of each op's reduction order;
- ``versions``: the retired versions and the value-only ones;
- ``registry``: looking ops up, and refusing graphs older than the contract;
- ``generate`` and ``header``: the generated files for the C++ side and ``--write`` / ``--check``.

Invariants:
- every fact lives in one module of the package and is re-exported here unchanged (the same
  objects: a test that replaces an entry of ``OPS`` changes every consumer's view);
- the modules import in one direction: numerics, versions <- schema <- ops <- registry <- generate
  <- header (the header generator reads the package, loaded lazily by ``generate``).
"""

from __future__ import annotations

from .numerics import (ACTIVATION_FORMATS, DOMAIN, E2M1_MAX, E2M1_VALUES, E4M3_MAX, FAMILIES, FP8_BLOCK,
                       GROUP_SIZES, KERNEL_K_MULTIPLE, NVFP4_BLOCK, NVFP4_GLOBAL_DIVISOR, X_DTYPES, ceil_div,
                       kernel_k_check)
from .schema import Attribute, Input, OpSpec, Output
from .versions import (OLDER_VERSIONS, STATIC_ACTIVATION_SCALE, VALUE_SINCE, compatible_version,
                       names_plugin_version)
from .ops import (ATTENTION, ATTENTION_BLOCK_KEYS, ATTENTION_CHUNK_BLOCKS, ATTENTION_DTYPES, ATTENTION_HEAD_DIMS,
                  C_ENUMS, CAUSAL_CONV1D, FLOAT_PROJ, GATED_DELTA_RULE, GDN_CONV_KERNELS, GDN_HEAD_K_DIMS,
                  GDN_HEAD_V_BLOCK, GDN_L2NORM_EPS, GDN_SOFTPLUS_THRESHOLD, GDN_STATE_PART, LOG2E, MOE_LAYOUTS,
                  NON_PROJECTION_CATEGORIES, OPS, RMSNORM, RMSNORM_BLOCK, ROUTER, W4A4, W4A16, W4A16_SCALE_DTYPE, W8A8,
                  W8A8_FP8_ARITHMETIC, W8A8_MOE_VERSION, W8A8_VERSION, attention_scale_log2, grouped)
from .registry import (by_kind, check_model, domain_version, grouped_by_kind, op, op_type_of, op_types, version_check,
                       projections)
from .generate import JSON_PATH, generated, main, stale, to_dict, to_json

__all__ = [
    "ACTIVATION_FORMATS", "DOMAIN", "E2M1_MAX", "E2M1_VALUES", "E4M3_MAX", "FAMILIES", "FP8_BLOCK", "GROUP_SIZES",
    "KERNEL_K_MULTIPLE", "NVFP4_BLOCK", "NVFP4_GLOBAL_DIVISOR", "X_DTYPES", "ceil_div", "kernel_k_check",
    "Attribute", "Input", "OpSpec", "Output",
    "OLDER_VERSIONS", "STATIC_ACTIVATION_SCALE", "VALUE_SINCE", "compatible_version", "names_plugin_version",
    "ATTENTION", "ATTENTION_BLOCK_KEYS", "ATTENTION_CHUNK_BLOCKS", "ATTENTION_DTYPES", "ATTENTION_HEAD_DIMS",
    "C_ENUMS", "CAUSAL_CONV1D", "FLOAT_PROJ", "GATED_DELTA_RULE", "GDN_CONV_KERNELS", "GDN_HEAD_K_DIMS",
    "GDN_HEAD_V_BLOCK", "GDN_L2NORM_EPS", "GDN_SOFTPLUS_THRESHOLD", "GDN_STATE_PART", "LOG2E", "MOE_LAYOUTS",
    "NON_PROJECTION_CATEGORIES", "OPS", "RMSNORM", "RMSNORM_BLOCK", "ROUTER", "W4A4", "W4A16", "W4A16_SCALE_DTYPE",
    "W8A8", "W8A8_FP8_ARITHMETIC", "W8A8_MOE_VERSION", "W8A8_VERSION", "attention_scale_log2", "grouped",
    "by_kind", "check_model", "domain_version", "grouped_by_kind", "op", "op_type_of", "op_types", "version_check",
    "projections",
    "JSON_PATH", "generated", "main", "stale", "to_dict", "to_json",
]
