"""The CUDA kernels of the non-projection ops (``metrale::rms_norm``, ``float_proj``, ``router``;
plugins/rmsNorm, plugins/floatProj, plugins/router)."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch
from torch import Tensor

from .library import _DTYPE_CODES, _check, _declared, _f32, _on_device, _prepare, _ptr, _stream, _workspace


def _declare_other(lib: ctypes.CDLL) -> None:
    p, i32, i64, sz, f32 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t, ctypes.c_float
    lib.metrale_rms_norm_threads_per_row.argtypes = [i64]
    lib.metrale_rms_norm_threads_per_row.restype = i32
    lib.metrale_rms_norm.argtypes = [p, i32, p, p, p, p, p, i64, i64, f32, i32, p]
    lib.metrale_rms_norm.restype = ctypes.c_int
    lib.metrale_float_proj_workspace_size.argtypes = [i64, i64, i64]
    lib.metrale_float_proj_workspace_size.restype = sz
    lib.metrale_float_proj.argtypes = [p, i32, p, p, p, i64, i64, i64, p, sz, p]
    lib.metrale_float_proj.restype = ctypes.c_int
    lib.metrale_router.argtypes = [p, i32, p, p, i64, i64, i64, i32, p]
    lib.metrale_router.restype = ctypes.c_int


def _other_lib() -> ctypes.CDLL:
    return _declared("_metrale_other", _declare_other)


def _aligned(t: Optional[Tensor]) -> Optional[Tensor]:
    """t contiguous with a 16-byte aligned start (a copy when a slice's offset is not)."""
    if t is None:
        return None
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _rows(op: str, name: str, x: Tensor, k: int, what: str = "x") -> Tensor:
    if x.dtype not in _DTYPE_CODES:
        raise TypeError(f"{op} ({name}): {what} must be float32, float16 or bfloat16, found {x.dtype}")
    if x.dim() != 2 or x.shape[1] != k:
        raise ValueError(f"{op} ({name}): {what} has shape {list(x.shape)}, expected [M, {k}]")
    return _aligned(x)


def _same(op: str, name: str, x: Tensor, tensors: dict) -> None:
    for tname, t in tensors.items():
        if t is not None and (t.device != x.device or t.dtype != x.dtype):
            raise ValueError(f"{op} ({name}): {tname} is {t.dtype} on {t.device}, x {x.dtype} on {x.device}")


def launch_rms_norm(x: Tensor, weight: Tensor, residual: Optional[Tensor], gate: Optional[Tensor], y: Tensor,
                    s: Optional[Tensor], epsilon: float, weight_offset: int, name: str = "rms_norm") -> None:
    """The RMSNorm launcher on [M, K] tensors already checked (contiguous, 16-byte aligned, one
    dtype and device): y, and s = x + residual (or x) where ``s`` is given. The plugin's call
    passes no s without a residual; the torch op passes one (its second output)."""
    op, k = "metrale::rms_norm", x.shape[1]
    with _on_device(x.device):
        err = _other_lib().metrale_rms_norm(x.data_ptr(), _DTYPE_CODES[x.dtype], weight.data_ptr(), _ptr(residual),
                                            _ptr(gate), y.data_ptr(), _ptr(s), x.shape[0], k, float(epsilon),
                                            int(weight_offset), _stream(x.device))
    _check(err, op, name, f"m={x.shape[0]} k={k} {x.dtype} (k a multiple of 8, 4 for float32)")


def rms_norm_cuda(x, weight, residual, gate, k, epsilon, weight_offset, family, name):
    """(y, s) of the RMSNorm kernel; s (x + residual, or a copy of x) is written by the kernel itself,
    so the op is one launch."""
    op = "metrale::rms_norm"
    shape = x.shape
    for tname, t in (("residual", residual), ("gate", gate)):
        if t is not None and t.shape != shape:
            raise ValueError(f"{op} ({name}): {tname} has shape {list(t.shape)}, x {list(shape)}")
    x = _rows(op, name, x.reshape(-1, shape[-1]), k)
    _same(op, name, x, dict(weight=weight, residual=residual, gate=gate))
    if tuple(weight.shape) != (k,):
        raise ValueError(f"{op} ({name}): weight has shape {list(weight.shape)}, expected [{k}]")
    res = None if residual is None else _rows(op, name, residual.reshape(-1, k), k, "residual")
    g = None if gate is None else _rows(op, name, gate.reshape(-1, k), k, "gate")
    y = torch.empty_like(x)
    s = torch.empty_like(x)
    launch_rms_norm(x, _aligned(weight), res, g, y, s, epsilon, weight_offset, name)
    return y.reshape(shape), s.reshape(shape)


def float_proj_cuda(x, weight, bias, n, k, family, name):
    op = "metrale::float_proj"
    x2, lead = _prepare(op, name, x, k, dict(weight=weight, bias=bias))
    if weight.dtype != torch.bfloat16 or tuple(weight.shape) != (n, k):
        raise ValueError(f"{op} ({name}): weight must be bfloat16 [{n}, {k}], found {weight.dtype} {list(weight.shape)}")
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    lib, m = _other_lib(), x2.shape[0]
    with torch.cuda.device(x2.device):
        ws = _workspace(lib.metrale_float_proj_workspace_size(m, n, k), x2.device)
        err = lib.metrale_float_proj(x2.data_ptr(), _DTYPE_CODES[x2.dtype], _aligned(weight).data_ptr(),
                                     _ptr(_f32(bias)), y.data_ptr(), m, n, k, ws.data_ptr(), ws.numel(),
                                     _stream(x2.device))
    _check(err, op, name, f"m={m} n={n} k={k} (k must be a multiple of 16 on the GPU)")
    return y.reshape(*lead, n)


def router_cuda(x, num_experts, top_k, normalize, family, name):
    op = "metrale::router"
    x = _rows(op, name, x, num_experts, "logits")
    m = x.shape[0]
    ids = torch.empty((m, top_k), dtype=torch.int32, device=x.device)
    w = torch.empty((m, top_k), dtype=x.dtype, device=x.device)
    lib = _other_lib()
    with torch.cuda.device(x.device):
        err = lib.metrale_router(x.data_ptr(), _DTYPE_CODES[x.dtype], ids.data_ptr(), w.data_ptr(), m, num_experts,
                                 top_k, int(normalize), _stream(x.device))
    _check(err, op, name, f"m={m} experts={num_experts} top_k={top_k} (at most 1024 experts, top_k <= 32)")
    return ids, w


torch.library.register_kernel("metrale::rms_norm", "cuda", rms_norm_cuda)
torch.library.register_kernel("metrale::float_proj", "cuda", float_proj_cuda)
torch.library.register_kernel("metrale::router", "cuda", router_cuda)
