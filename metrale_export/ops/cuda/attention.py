"""The CUDA kernel of the Attention op (``metrale::attention``; plugins/attention/)."""

from __future__ import annotations

import ctypes

import torch
from torch import Tensor

from ... import contract
from .library import _DTYPE_CODES, _check, _on_device, _stream, _workspace, load_library


def _attention_lib() -> ctypes.CDLL:
    lib = load_library()
    if not hasattr(lib, "_metrale_attention"):
        p, i32, i64, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t
        lib.metrale_attention_split.argtypes = [i64, i64, i64, i64, i64, i64]
        lib.metrale_attention_split.restype = i32
        lib.metrale_attention_path.argtypes = [i64, i64, i64, i64, i64, i64, i32]
        lib.metrale_attention_path.restype = i32
        lib.metrale_attention_workspace_size.argtypes = [i32, i64, i64, i64, i64, i64, i64, i32]
        lib.metrale_attention_workspace_size.restype = sz
        lib.metrale_attention.argtypes = [p, p, p, p, i32, i64, i64, i64, i64, i64, i64, ctypes.c_float, i32, p, sz,
                                          p]
        lib.metrale_attention.restype = ctypes.c_int
        lib._metrale_attention = True
    return lib


def attention_split(batch: int, q_heads: int, kv_heads: int, seq: int, total: int, head_dim: int) -> bool:
    """Whether the launcher splits this shape into per-chunk CTAs and a merge (speed only: the bits
    are the same either way)."""
    return bool(_attention_lib().metrale_attention_split(batch, q_heads, kv_heads, seq, total, head_dim))


PATHS = {0: "unsplit", 1: "split", 2: "decode"}


def attention_path(batch: int, q_heads: int, kv_heads: int, seq: int, total: int, head_dim: int, split: int = -1) -> str:
    """The launcher's path for this shape and ``split`` (speed only: the bits are the same on every
    path): "decode" (the decode kernel, seq * group <= 16, unless METRALE_ATTENTION_DECODE=base),
    "split" or "unsplit"."""
    return PATHS[int(_attention_lib().metrale_attention_path(batch, q_heads, kv_heads, seq, total, head_dim, split))]


def launch_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, split: int = -1, name: str = "attention") -> Tensor:
    """The Attention op on CUDA: q [B, Hq, S, D], k/v [B, Hkv, T, D] (bf16, f16 or float32, all the same)
    -> [B, S, Hq, D] of that dtype.
    ``split``: 1 per-chunk CTAs and a merge, 0 none, -1 the launcher's choice (attention_path)."""
    from ..attention import check_shapes

    op = "metrale::attention"
    b, hq, hkv, s, t, d = check_shapes(q, k, v, f"{op} ({name})")
    if q.dtype not in _DTYPE_CODES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{op} ({name}): q, k, v must have one dtype, float32, float16 or bfloat16, found "
                        f"{q.dtype}, {k.dtype}, {v.dtype}")
    for tname, tt in (("k", k), ("v", v)):
        if tt.device != q.device:
            raise ValueError(f"{op} ({name}): {tname} is on {tt.device}, q on {q.device}")
    lib = _attention_lib()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty((b, s, hq, d), dtype=q.dtype, device=q.device)
    with _on_device(q.device):
        ws = _workspace(lib.metrale_attention_workspace_size(_DTYPE_CODES[q.dtype], b, hq, hkv, s, t, d, split), q.device)
        err = lib.metrale_attention(q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), _DTYPE_CODES[q.dtype],
                                    b, hq, hkv, s, t, d, contract.attention_scale_log2(scale), split,
                                    ws.data_ptr(), ws.numel(), _stream(q.device))
    _check(err, op, name, f"batch={b} q_heads={hq} kv_heads={hkv} seq={s} total={t} head_dim={d}")
    return out


def attention_cuda(q, key, value, q_heads, kv_heads, head_dim, scale, family, name):
    op = "metrale::attention"
    if q.shape[1] != q_heads or key.shape[1] != kv_heads or q.shape[-1] != head_dim:
        raise ValueError(f"{op} ({name}): q {list(q.shape)} and key {list(key.shape)} do not match q_heads="
                         f"{q_heads}, kv_heads={kv_heads}, head_dim={head_dim}")
    return launch_attention(q, key, value, float(scale), name=name)


torch.library.register_kernel("metrale::attention", "cuda", attention_cuda)
