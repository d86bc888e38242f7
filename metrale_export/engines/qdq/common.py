"""What the weight formats' qdq lowerings share: an input read as an initializer (a computed one
is refused, naming the node), a shape check, the packed nibbles and e4m3 bits decoded, and the
contract's constants they use.

Invariants: pure numpy on the node's initializers; every refusal names the node and the input.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx_graphsurgeon as gs

from ... import contract
from ..nodes import LoweringError

E4M3_MAX = contract.E4M3_MAX
NVFP4_GLOBAL = contract.NVFP4_GLOBAL_DIVISOR
FP8_BLOCK = contract.FP8_BLOCK
NVFP4_BLOCK = contract.NVFP4_BLOCK
E2M1 = np.array(contract.E2M1_VALUES, dtype=np.float32)


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """[..., K/2] int8 -> [..., K] uint8 nibbles, the even element in the low nibble."""
    p = packed.view(np.uint8)
    return np.stack((p & 0xF, p >> 4), axis=-1).reshape(*p.shape[:-1], p.shape[-1] * 2)


def e4m3_values(bits: np.ndarray) -> np.ndarray:
    return bits.view(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def constant(node: gs.Node, index: int, what: str, key: str) -> np.ndarray:
    t = node.inputs[index] if index < len(node.inputs) else None
    if not isinstance(t, gs.Constant):
        found = "missing" if t is None else f"a computed tensor {t.name!r}"
        raise LoweringError(
            f"node {key} ({node.op}): input {index} ({what}) must be an initializer for the qdq "
            f"lowering, found {found}"
        )
    return np.asarray(t.values)


def expect_shape(arr: np.ndarray, shape: tuple, what: str, key: str, node: gs.Node) -> None:
    if tuple(arr.shape) != tuple(shape):
        raise LoweringError(
            f"node {key} ({node.op}): {what}: expected shape {list(shape)}, found {list(arr.shape)}"
        )
