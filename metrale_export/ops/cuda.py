"""CUDA implementations of the ``metrale`` custom ops, through the plugin kernels' C launchers.

Importing this module registers CUDA kernels for every op of ``torch_ops``: the projections
(``metrale::w4a16_proj``, ``w8a8_proj``, ``w4a4_proj`` and their grouped forms) and the non-projection
ops (``rms_norm``, ``float_proj``, ``router``); the shared library ``libmetrale_kernels.so`` (built by
``make plugins``) is loaded with ctypes on the first CUDA call, from ``$METRALE_KERNELS_LIB`` or
``<repo>/build/plugins/libmetrale_kernels.so``. Invariants:
- the CUDA path runs exactly the arithmetic of the TensorRT plugins (same launchers, same library);
- importing never needs a GPU or the library; a missing library is a ``KernelLibraryError`` at call
  time that says where it looked and how to build it;
- every launch goes on the current torch stream of the input's device, with a workspace tensor
  from torch's allocator.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from .. import contract
from . import torch_ops  # noqa: F401  (defines the custom ops this module adds kernels to)

# The C enums of include/metrale/kernels.h, from the contract's value orders (tests/plugins checks
# the header against them).
_DTYPE_CODES = {getattr(torch, name): code for code, name in enumerate(contract.X_DTYPES)}
_ACT_FORMATS = {name: code for code, name in enumerate(contract.ACTIVATION_FORMATS)}
_WEIGHT_SCALES = contract.W8A8.codes("weight_scale_granularity")
_ACT_SCALES = contract.W8A8.codes("activation_scale_granularity")
_CUDA_ERRORS = {1: "cudaErrorInvalidValue (bad argument)", 801: "cudaErrorNotSupported"}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


class KernelLibraryError(RuntimeError):
    """The kernel library is missing, cannot be loaded, or a launch returned an error."""


def library_path() -> Path:
    """Where the kernel library is looked for: $METRALE_KERNELS_LIB, else the repository build."""
    env = os.environ.get("METRALE_KERNELS_LIB")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "build" / "plugins" / "libmetrale_kernels.so"


def _declare(lib: ctypes.CDLL) -> None:
    p, i32, i64, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t
    lib.metrale_w4a16_workspace_size.argtypes = [i64, i64, i64, i64]
    lib.metrale_w4a16_workspace_size.restype = sz
    lib.metrale_w4a16_proj.argtypes = [p, i32, p, p, p, p, p, i64, i64, i64, i64, p, sz, p]
    lib.metrale_w4a16_proj.restype = ctypes.c_int
    lib.metrale_w8a8_workspace_size.argtypes = [i64, i64, i64, i32, i32]
    lib.metrale_w8a8_workspace_size.restype = sz
    lib.metrale_w8a8_proj.argtypes = [p, i32, p, p, i32, i32, i32, p, p, p, i64, i64, i64, p, sz, p]
    lib.metrale_w8a8_proj.restype = ctypes.c_int
    lib.metrale_w4a4_workspace_size.argtypes = [i64, i64, i64, i32]
    lib.metrale_w4a4_workspace_size.restype = sz
    lib.metrale_w4a4_proj.argtypes = [p, i32, p, p, p, p, i32, p, p, i64, i64, i64, p, sz, p]
    lib.metrale_w4a4_proj.restype = ctypes.c_int


def load_library() -> ctypes.CDLL:
    """The loaded kernel library (loaded once)."""
    global _lib
    with _lock:
        if _lib is None:
            path = library_path()
            if not path.is_file():
                raise KernelLibraryError(
                    f"metrale CUDA ops: kernel library not found at {path}; build it with "
                    "'make plugins' (needs nvcc) or set METRALE_KERNELS_LIB to its path"
                )
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as exc:
                raise KernelLibraryError(f"metrale CUDA ops: cannot load {path}: {exc}") from exc
            _declare(lib)
            _lib = lib
        return _lib


def available() -> bool:
    """True when a CUDA device is present and the kernel library loads."""
    if not torch.cuda.is_available():
        return False
    try:
        load_library()
    except KernelLibraryError:
        return False
    return True


def _ptr(t: Optional[Tensor]) -> Optional[int]:
    return None if t is None else t.data_ptr()


def _check(err: int, op: str, name: str, detail: str) -> None:
    if err != 0:
        what = _CUDA_ERRORS.get(err, f"CUDA error {err}")
        raise KernelLibraryError(f"{op} ({name}): the launcher returned {what} for {detail}")


def _runs(spec: contract.OpSpec, name: str, activation_format: str) -> str:
    """``metrale::<op>`` of ``spec``; a ValueError for an activation format the op does not have (the
    kernels run exactly the contract's)."""
    op = f"metrale::{spec.torch_name}"
    allowed = spec.activation_formats
    if activation_format not in allowed:
        runs = f"only {allowed[0]}" if len(allowed) == 1 else " or ".join(allowed)
        raise ValueError(f"{op} ({name}): runs {runs} activations, asked for {activation_format!r}")
    return op


def _prepare(op: str, name: str, x: Tensor, k: int, tensors: dict) -> tuple[Tensor, tuple]:
    if x.dtype not in _DTYPE_CODES:
        raise TypeError(f"{op} ({name}): x must be float32, float16 or bfloat16, found {x.dtype}")
    if x.shape[-1] != k:
        raise ValueError(f"{op} ({name}): x has {x.shape[-1]} columns, expected k={k}")
    for tname, t in tensors.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{op} ({name}): {tname} is on {t.device}, x on {x.device}")
    lead = tuple(x.shape[:-1])
    return x.reshape(-1, k).contiguous(), lead


def _workspace(nbytes: int, device: torch.device) -> Tensor:
    return torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device=device)


def _stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def launch_w4a16(x2: Tensor, weight: Tensor, weight_scale: Tensor, zero_point: Optional[Tensor],
                 bias: Optional[Tensor], y: Tensor, n: int, k: int, group_size: int,
                 name: str = "") -> Tensor:
    """Run metrale_w4a16_proj into ``y`` ([m, n], dtype of x2). All tensors on one CUDA device,
    contiguous, with the dtypes of docs/ops.md."""
    lib = load_library()
    m = x2.shape[0]
    weight_scale = _bf16("metrale::w4a16_proj", name, weight_scale)
    with torch.cuda.device(x2.device):
        ws = _workspace(lib.metrale_w4a16_workspace_size(m, n, k, group_size), x2.device)
        err = lib.metrale_w4a16_proj(x2.data_ptr(), _DTYPE_CODES[x2.dtype], weight.data_ptr(),
                                     weight_scale.data_ptr(), _ptr(zero_point), _ptr(bias), y.data_ptr(),
                                     m, n, k, group_size, ws.data_ptr(), ws.numel(), _stream(x2.device))
    _check(err, "metrale::w4a16_proj", name, f"m={m} n={n} k={k} group_size={group_size}")
    return y


def launch_w8a8(x2: Tensor, weight: Tensor, weight_scale: Tensor, bias: Optional[Tensor], y: Tensor,
                n: int, k: int, weight_scale_granularity: str, activation_format: str,
                activation_scale_granularity: str, name: str = "",
                input_scale: Optional[Tensor] = None) -> Tensor:
    """Run metrale_w8a8_proj into ``y`` (``input_scale``: float32 [1], the static scale of
    activation_scale_granularity ``tensor``)."""
    lib = load_library()
    m = x2.shape[0]
    act, wsg = _ACT_FORMATS[activation_format], _WEIGHT_SCALES[weight_scale_granularity]
    asg = _ACT_SCALES[activation_scale_granularity]
    with torch.cuda.device(x2.device):
        ws = _workspace(lib.metrale_w8a8_workspace_size(m, n, k, act, asg), x2.device)
        err = lib.metrale_w8a8_proj(x2.data_ptr(), _DTYPE_CODES[x2.dtype], weight.data_ptr(),
                                    weight_scale.data_ptr(), wsg, act, asg, _ptr(input_scale), _ptr(bias),
                                    y.data_ptr(), m, n, k,
                                    ws.data_ptr(), ws.numel(), _stream(x2.device))
    _check(err, "metrale::w8a8_proj", name,
           f"m={m} n={n} k={k} {weight_scale_granularity} {activation_format} "
           f"{activation_scale_granularity} (k must be a multiple of 16 on the GPU)")
    return y


def launch_w4a4(x2: Tensor, weight: Tensor, weight_scale: Tensor, weight_global_scale: Tensor,
                input_scale: Optional[Tensor], bias: Optional[Tensor], y: Tensor, n: int, k: int,
                activation_format: str, name: str = "") -> Tensor:
    """Run metrale_w4a4_proj into ``y``."""
    lib = load_library()
    m = x2.shape[0]
    act = _ACT_FORMATS[activation_format]
    with torch.cuda.device(x2.device):
        ws = _workspace(lib.metrale_w4a4_workspace_size(m, n, k, act), x2.device)
        err = lib.metrale_w4a4_proj(x2.data_ptr(), _DTYPE_CODES[x2.dtype], weight.data_ptr(),
                                    weight_scale.data_ptr(), weight_global_scale.data_ptr(),
                                    _ptr(input_scale), act, _ptr(bias), y.data_ptr(), m, n, k,
                                    ws.data_ptr(), ws.numel(), _stream(x2.device))
    _check(err, "metrale::w4a4_proj", name,
           f"m={m} n={n} k={k} {activation_format} (k must be a multiple of 32 on the GPU)")
    return y


def _f32(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.to(torch.float32).contiguous()


def _bf16(op: str, name: str, t: Tensor) -> Tensor:
    """W4A16's group scales: bfloat16 (op version 2), never a silent conversion."""
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{op} ({name}): weight_scale must be bfloat16 (op version 2), found {t.dtype}")
    return t.contiguous()


def w4a16_proj_cuda(x, weight, weight_scale, zero_point, bias, n, k, group_size, activation_format,
                    family, name):
    op = _runs(contract.W4A16, name, activation_format)
    x2, lead = _prepare(op, name, x, k, dict(weight=weight, weight_scale=weight_scale,
                                             zero_point=zero_point, bias=bias))
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    zp = None if zero_point is None else zero_point.contiguous()
    launch_w4a16(x2, weight.contiguous(), weight_scale.contiguous(), zp, _f32(bias), y, n, k, group_size, name)
    return y.reshape(*lead, n)


def w8a8_proj_cuda(x, weight, weight_scale, input_scale, bias, n, k, weight_scale_granularity, activation_format,
                   activation_scale_granularity, family, name):
    op = _runs(contract.W8A8, name, activation_format)
    x2, lead = _prepare(op, name, x, k, dict(weight=weight, weight_scale=weight_scale, input_scale=input_scale,
                                             bias=bias))
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    si = None if input_scale is None else input_scale.to(torch.float32).reshape(1).contiguous()
    launch_w8a8(x2, weight.contiguous(), _f32(weight_scale), _f32(bias), y, n, k, weight_scale_granularity,
                activation_format, activation_scale_granularity, name, si)
    return y.reshape(*lead, n)


def w4a4_proj_cuda(x, weight, weight_scale, weight_global_scale, input_scale, bias, n, k,
                   activation_format, family, name):
    op = _runs(contract.W4A4, name, activation_format)
    x2, lead = _prepare(op, name, x, k, dict(weight=weight, weight_scale=weight_scale,
                                             weight_global_scale=weight_global_scale,
                                             input_scale=input_scale, bias=bias))
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    gw = weight_global_scale.to(torch.float32).reshape(1).contiguous()
    si = None if input_scale is None else input_scale.to(torch.float32).reshape(1).contiguous()
    launch_w4a4(x2, weight.contiguous(), weight_scale.contiguous(), gw, si, _f32(bias), y, n, k,
                activation_format, name)
    return y.reshape(*lead, n)


torch.library.register_kernel("metrale::w4a16_proj", "cuda", w4a16_proj_cuda)
torch.library.register_kernel("metrale::w8a8_proj", "cuda", w8a8_proj_cuda)
torch.library.register_kernel("metrale::w4a4_proj", "cuda", w4a4_proj_cuda)


# --- the grouped-expert ops (plugins/moeProj/) ------------------------------------------------------

def _declare_moe(lib: ctypes.CDLL) -> None:
    p, i32, i64, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t
    lib.metrale_w4a16_moe_workspace_size.argtypes = [i64, i64, i64, i64, i64, i32]
    lib.metrale_w4a16_moe_workspace_size.restype = sz
    lib.metrale_w4a16_moe_proj.argtypes = [p, i32, p, p, p, p, p, p, p, i64, i64, i64, i64, i64, i64, i32, p, sz, p]
    lib.metrale_w4a16_moe_proj.restype = ctypes.c_int
    lib.metrale_w8a8_moe_workspace_size.argtypes = [i64, i64, i64, i64, i64, i32, i32, i32]
    lib.metrale_w8a8_moe_workspace_size.restype = sz
    lib.metrale_w8a8_moe_proj.argtypes = [p, i32, p, p, p, p, i32, i32, i32, p, p, i64, i64, i64, i64, i64, i32,
                                          p, sz, p]
    lib.metrale_w8a8_moe_proj.restype = ctypes.c_int
    lib.metrale_w4a4_moe_workspace_size.argtypes = [i64, i64, i64, i64, i64, i32, i32]
    lib.metrale_w4a4_moe_workspace_size.restype = sz
    lib.metrale_w4a4_moe_proj.argtypes = [p, i32, p, p, p, p, p, p, i32, p, p, i64, i64, i64, i64, i64, i32,
                                          p, sz, p]
    lib.metrale_w4a4_moe_proj.restype = ctypes.c_int


def _declared(tag: str, declare) -> ctypes.CDLL:
    """The kernels library with ``declare``'s argument types set, once (``tag`` marks it done)."""
    lib = load_library()
    if not hasattr(lib, tag):
        declare(lib)
        setattr(lib, tag, True)
    return lib


def _moe_lib() -> ctypes.CDLL:
    return _declared("_metrale_moe", _declare_moe)


def _moe_prepare(op, name, x, topk_ids, topk_weights, k, top_k, combine, tensors):
    if x.dtype not in _DTYPE_CODES:
        raise TypeError(f"{op} ({name}): x must be float32, float16 or bfloat16, found {x.dtype}")
    want = (top_k, k) if combine else (k,)
    if tuple(x.shape[1:]) != want:
        raise ValueError(f"{op} ({name}): x has shape {list(x.shape)}, expected [M, {', '.join(map(str, want))}]")
    m = x.shape[0]
    if topk_ids.dtype != torch.int32 or tuple(topk_ids.shape) != (m, top_k):
        raise ValueError(f"{op} ({name}): topk_ids must be int32 [{m}, {top_k}], found {topk_ids.dtype} "
                         f"{list(topk_ids.shape)}")
    if combine and (topk_weights is None or tuple(topk_weights.shape) != (m, top_k)):
        raise ValueError(f"{op} ({name}): combine=1 needs topk_weights [{m}, {top_k}]")
    for tname, t in {**tensors, "topk_ids": topk_ids, "topk_weights": topk_weights}.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{op} ({name}): {tname} is on {t.device}, x on {x.device}")
    tw = None if topk_weights is None else topk_weights.to(x.dtype).contiguous()
    return x.contiguous(), topk_ids.contiguous(), tw


def _moe_out(x, n, top_k, combine):
    m = x.shape[0]
    return torch.empty((m, n) if combine else (m, top_k, n), dtype=x.dtype, device=x.device)


def w4a16_moe_proj_cuda(x, topk_ids, topk_weights, weight, weight_scale, zero_point, bias, n, k, num_experts,
                        top_k, combine, group_size, activation_format, family, name):
    op = _runs(contract.op("W4A16MoEProj"), name, activation_format)
    x, ids, tw = _moe_prepare(op, name, x, topk_ids, topk_weights, k, top_k, combine,
                              dict(weight=weight, weight_scale=weight_scale, zero_point=zero_point, bias=bias))
    lib, y, m = _moe_lib(), _moe_out(x, n, top_k, combine), x.shape[0]
    with torch.cuda.device(x.device):
        ws = _workspace(lib.metrale_w4a16_moe_workspace_size(m, top_k, num_experts, n, k, _DTYPE_CODES[x.dtype]),
                        x.device)
        zp = None if zero_point is None else zero_point.contiguous()
        err = lib.metrale_w4a16_moe_proj(x.data_ptr(), _DTYPE_CODES[x.dtype], ids.data_ptr(), _ptr(tw),
                                         weight.contiguous().data_ptr(), _bf16(op, name, weight_scale).data_ptr(), _ptr(zp),
                                         _ptr(_f32(bias)), y.data_ptr(), m, top_k, num_experts, n, k, group_size,
                                         int(combine), ws.data_ptr(), ws.numel(), _stream(x.device))
    _check(err, op, name, f"m={m} top_k={top_k} experts={num_experts} n={n} k={k} group_size={group_size}")
    return y


def w8a8_moe_proj_cuda(x, topk_ids, topk_weights, weight, weight_scale, input_scale, bias, n, k, num_experts, top_k,
                       combine, weight_scale_granularity, activation_format, activation_scale_granularity, family,
                       name):
    op = _runs(contract.op("W8A8MoEProj"), name, activation_format)
    x, ids, tw = _moe_prepare(op, name, x, topk_ids, topk_weights, k, top_k, combine,
                              dict(weight=weight, weight_scale=weight_scale, bias=bias))
    lib, y, m = _moe_lib(), _moe_out(x, n, top_k, combine), x.shape[0]
    act, wsg = _ACT_FORMATS[activation_format], _WEIGHT_SCALES[weight_scale_granularity]
    asg = _ACT_SCALES[activation_scale_granularity]
    with torch.cuda.device(x.device):
        ws = _workspace(lib.metrale_w8a8_moe_workspace_size(m, top_k, num_experts, n, k, _DTYPE_CODES[x.dtype],
                                                            act, asg), x.device)
        err = lib.metrale_w8a8_moe_proj(x.data_ptr(), _DTYPE_CODES[x.dtype], ids.data_ptr(), _ptr(tw),
                                        weight.contiguous().data_ptr(), _f32(weight_scale).data_ptr(), wsg, act, asg,
                                        _ptr(_f32(bias)), y.data_ptr(), m, top_k, num_experts, n, k, int(combine),
                                        ws.data_ptr(), ws.numel(), _stream(x.device))
    _check(err, op, name, f"m={m} top_k={top_k} experts={num_experts} n={n} k={k} {activation_format}")
    return y


def w4a4_moe_proj_cuda(x, topk_ids, topk_weights, weight, weight_scale, weight_global_scale, input_scale, bias, n,
                       k, num_experts, top_k, combine, activation_format, family, name):
    op = _runs(contract.op("W4A4MoEProj"), name, activation_format)
    x, ids, tw = _moe_prepare(op, name, x, topk_ids, topk_weights, k, top_k, combine,
                              dict(weight=weight, weight_scale=weight_scale, bias=bias))
    lib, y, m = _moe_lib(), _moe_out(x, n, top_k, combine), x.shape[0]
    act = _ACT_FORMATS[activation_format]
    gw = weight_global_scale.to(torch.float32).reshape(-1).contiguous()
    si = None if input_scale is None else input_scale.to(torch.float32).reshape(-1).contiguous()
    with torch.cuda.device(x.device):
        ws = _workspace(lib.metrale_w4a4_moe_workspace_size(m, top_k, num_experts, n, k, _DTYPE_CODES[x.dtype], act),
                        x.device)
        err = lib.metrale_w4a4_moe_proj(x.data_ptr(), _DTYPE_CODES[x.dtype], ids.data_ptr(), _ptr(tw),
                                        weight.contiguous().data_ptr(), weight_scale.contiguous().data_ptr(),
                                        gw.data_ptr(), _ptr(si), act, _ptr(_f32(bias)), y.data_ptr(), m, top_k,
                                        num_experts, n, k, int(combine), ws.data_ptr(), ws.numel(),
                                        _stream(x.device))
    _check(err, op, name, f"m={m} top_k={top_k} experts={num_experts} n={n} k={k} {activation_format}")
    return y


torch.library.register_kernel("metrale::w4a16_moe_proj", "cuda", w4a16_moe_proj_cuda)
torch.library.register_kernel("metrale::w8a8_moe_proj", "cuda", w8a8_moe_proj_cuda)
torch.library.register_kernel("metrale::w4a4_moe_proj", "cuda", w4a4_moe_proj_cuda)


# --- the Attention op (plugins/attention/) ------------------------------------------------------

def _attention_lib() -> ctypes.CDLL:
    lib = load_library()
    if not hasattr(lib, "_metrale_attention"):
        p, i32, i64, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t
        lib.metrale_attention_split.argtypes = [i64, i64, i64, i64, i64, i64]
        lib.metrale_attention_split.restype = i32
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


def launch_attention(q: Tensor, k: Tensor, v: Tensor, scale: float, split: int = -1, name: str = "attention") -> Tensor:
    """The Attention op on CUDA: q [B, Hq, S, D], k/v [B, Hkv, T, D] (bf16, f16 or float32, all the same)
    -> [B, S, Hq, D] of that dtype.
    ``split``: 1 per-chunk CTAs and a merge, 0 none, -1 the launcher's choice."""
    from .attention import check_shapes

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
    with torch.cuda.device(q.device):
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
# --- the non-projection ops (plugins/rmsNorm, plugins/floatProj, plugins/router) -------------------

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


def rms_norm_cuda(x, weight, residual, gate, k, epsilon, weight_offset, family, name):
    op = "metrale::rms_norm"
    shape = x.shape
    for tname, t in dict(residual=residual, gate=gate).items():
        if t is not None and t.shape != shape:
            raise ValueError(f"{op} ({name}): {tname} has shape {list(t.shape)}, x {list(shape)}")
    x = _rows(op, name, x.reshape(-1, shape[-1]), k)
    _same(op, name, x, dict(weight=weight, residual=residual, gate=gate))
    if tuple(weight.shape) != (k,):
        raise ValueError(f"{op} ({name}): weight has shape {list(weight.shape)}, expected [{k}]")
    res = None if residual is None else _rows(op, name, residual.reshape(-1, k), k, "residual")
    g = None if gate is None else _rows(op, name, gate.reshape(-1, k), k, "gate")
    y = torch.empty_like(x)
    s = torch.empty_like(x) if res is not None else None
    lib = _other_lib()
    with torch.cuda.device(x.device):
        err = lib.metrale_rms_norm(x.data_ptr(), _DTYPE_CODES[x.dtype], _aligned(weight).data_ptr(), _ptr(res),
                                   _ptr(g), y.data_ptr(), _ptr(s), x.shape[0], k, float(epsilon), int(weight_offset),
                                   _stream(x.device))
    _check(err, op, name, f"m={x.shape[0]} k={k} {x.dtype} (k a multiple of 8, 4 for float32)")
    return y.reshape(shape), (s if s is not None else x.clone()).reshape(shape)


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
