"""The contract's vocabulary and scalar formats: the domain, the projection families, the
activation formats and x dtypes (in the kernels' enum order), the e4m3 / e2m1 constants and blocks,
and what the CUDA kernels serve beyond the contract (``kernel_k_check``).

Invariants:
- plain constants and pure functions of them: no op spec is defined here (contract/ops.py);
- a tuple's order is the order of the kernels' C enum that takes its index (contract.h, generated).
"""

from __future__ import annotations

from ..errors import Check

DOMAIN = "metrale"

FAMILIES = ("attn", "ffn", "gdn", "moe", "head")
ACTIVATION_FORMATS = ("bf16", "fp8", "nvfp4")  # index = the kernels' MetraleActFormat code
X_DTYPES = ("float32", "float16", "bfloat16")  # index = the kernels' MetraleDType code

# Scalar formats and blocks (docs/ops.md, Arithmetic).
E4M3_MAX = 448.0
E2M1_MAX = 6.0
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitudes, indexed by code & 7
NVFP4_GLOBAL_DIVISOR = E2M1_MAX * E4M3_MAX  # 2688: a row's dynamic NVFP4 global scale is amax / this
FP8_BLOCK = 128  # block128 weight scales and row_block128 activation scales
NVFP4_BLOCK = 16  # k per e4m3 scale of W4A4Proj
GROUP_SIZES = (32, 64, 128)  # W4A16Proj group_size

# What the CUDA kernels (the TensorRT plugins, the torch CUDA ops) serve beyond the contract, per
# weight format (its dense and grouped-expert ops alike): K a multiple of this (16-byte weight rows
# for the copies; plugins/KERNELS.md, Limits). The contract and its CPU references take any even K;
# export and the plugin lowering's build refuse other K (kernel_k_check).
KERNEL_K_MULTIPLE = {"w4a16": 32}


def kernel_k_check(kind: str, k: int) -> Check:
    """Whether the CUDA kernels of weight format ``kind`` serve ``k`` (a refusal: one clause)."""
    step = KERNEL_K_MULTIPLE.get(kind)
    return Check.of([None if step is None or k % step == 0 else
                     f"K={k} is not a multiple of {step}, which its CUDA kernel needs (plugins/KERNELS.md, Limits)"])


def ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for positive ints: the number of blocks of ``b`` covering ``a`` (block scales)."""
    return -(-a // b)
