"""CUDA implementations of the ``metrale`` custom ops, through the plugin kernels' C launchers.

Importing this module registers CUDA kernels for every op of ``torch_ops``: the projections
(``metrale::w4a16_proj``, ``w8a8_proj``, ``w4a4_proj`` and their grouped forms) and the non-projection
ops (``rms_norm``, ``float_proj``, ``router``); the shared library ``libmetrale_kernels.so`` (built by
``make plugins``) is loaded with ctypes (``library``) on the first CUDA call, from ``$METRALE_KERNELS_LIB`` or
``<repo>/build/plugins/libmetrale_kernels.so``. Invariants:
- the CUDA path runs exactly the arithmetic of the TensorRT plugins (same launchers, same library);
- importing never needs a GPU or the library; a missing library is a ``KernelLibraryError`` at call
  time that says where it looked and how to build it;
- every launch goes on the current torch stream of the input's device, with a workspace tensor
  from torch's allocator.
"""
# One module per group of ops: projections, moe (grouped experts), attention, norms (RMSNorm,
# FloatProj, Router), gdn (CausalConv1d, GatedDeltaRule); importing each registers its torch kernels.

from __future__ import annotations

from .. import torch_ops  # noqa: F401  (defines the custom ops the modules below add kernels to)
from .attention import attention_cuda, attention_path, attention_split, launch_attention  # noqa: F401
from .gdn import causal_conv1d_cuda, gated_delta_rule_cuda  # noqa: F401
from .library import KernelLibraryError, available, library_path, load_library  # noqa: F401
from .moe import w4a4_moe_proj_cuda, w4a16_moe_proj_cuda, w8a8_moe_proj_cuda  # noqa: F401
from .norms import float_proj_cuda, launch_rms_norm, rms_norm_cuda, router_cuda  # noqa: F401
from .projections import (launch_w4a4, launch_w4a16, launch_w8a8, w4a4_proj_cuda, w4a16_proj_cuda,  # noqa: F401
                          w8a8_proj_cuda)
