"""The kernel library ``libmetrale_kernels.so`` behind the CUDA ops: finding and loading it (once,
with ctypes), the C enums of ``include/metrale/kernels.h`` as the contract orders them, and what
every launch shares (argument checks, pointers, the workspace, the stream, the error text).

Invariants: importing needs no GPU and no library; a missing library is a ``KernelLibraryError`` at
call time that says where it looked and how to build it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

from ... import contract

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
    return Path(__file__).resolve().parents[3] / "build" / "plugins" / "libmetrale_kernels.so"


def _declare_projections(lib: ctypes.CDLL) -> None:
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
    if _lib is not None:  # loaded: no lock on the launch path
        return _lib
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
            _declare_projections(lib)
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


def _index(device: torch.device) -> int:
    return torch.cuda.current_device() if device.index is None else device.index


def _stream(device: torch.device) -> int:
    """The raw handle of the current stream of ``device`` (the getter torch's own generated code
    calls: no Stream object is built, a few microseconds less host time a launch)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(_index(device)) if raw is not None else torch.cuda.current_stream(device).cuda_stream


def _on_device(device: torch.device):
    """``torch.cuda.device(device)`` where it is not the current device already, else nothing to do
    (the context manager's two device exchanges cost host time on every launch)."""
    return contextlib.nullcontext() if _index(device) == torch.cuda.current_device() else torch.cuda.device(device)


def _f32(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.to(torch.float32).contiguous()


def _bf16(op: str, name: str, t: Tensor) -> Tensor:
    """W4A16's group scales: bfloat16 (op version 2), never a silent conversion."""
    if t.dtype != torch.bfloat16:
        raise TypeError(f"{op} ({name}): weight_scale must be bfloat16 (op version 2), found {t.dtype}")
    return t.contiguous()


def _declared(tag: str, declare) -> ctypes.CDLL:
    """The kernels library with ``declare``'s argument types set, once (``tag`` marks it done)."""
    lib = load_library()
    if not hasattr(lib, tag):
        declare(lib)
        setattr(lib, tag, True)
    return lib
