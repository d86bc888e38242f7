"""The CUDA kernels of the projection ops (``metrale::w4a16_proj``, ``w8a8_proj``, ``w4a4_proj``):
the launchers of plugins/w4a16Proj, w8a8Proj and w4a4Proj, and the torch kernels that call them."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ... import contract
from .library import (_ACT_FORMATS, _ACT_SCALES, _DTYPE_CODES, _WEIGHT_SCALES, _bf16, _check, _f32, _prepare,
                      _ptr, _runs, _stream, _workspace, load_library)


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
