"""The CUDA kernels of the grouped-expert ops (``metrale::w4a16_moe_proj``, ``w8a8_moe_proj``,
``w4a4_moe_proj``; plugins/moeProj/)."""

from __future__ import annotations

import ctypes

import torch

from ... import contract
from .library import (_ACT_FORMATS, _ACT_SCALES, _DTYPE_CODES, _WEIGHT_SCALES, _bf16, _check, _declared, _f32,
                      _ptr, _runs, _stream, _workspace)


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


def _moe_lib() -> ctypes.CDLL:
    return _declared("_metrale_moe", _declare_moe)


def _check_moe_inputs(op, name, x, topk_ids, topk_weights, k, top_k, combine, tensors):
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
    _check_same_device(op, name, x, {**tensors, "topk_ids": topk_ids, "topk_weights": topk_weights})


def _check_same_device(op, name, x, tensors):
    for tname, t in tensors.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{op} ({name}): {tname} is on {t.device}, x on {x.device}")


def _moe_prepare(op, name, x, topk_ids, topk_weights, k, top_k, combine, tensors):
    _check_moe_inputs(op, name, x, topk_ids, topk_weights, k, top_k, combine, tensors)
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
