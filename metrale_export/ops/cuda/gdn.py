"""The CUDA kernels of the Gated DeltaNet ops (``metrale::causal_conv1d``, ``gated_delta_rule``;
plugins/gatedDeltaNet/)."""

from __future__ import annotations

import ctypes

import torch

from .library import _DTYPE_CODES, _check, _declared, _stream


def _declare_gdn(lib: ctypes.CDLL) -> None:
    p, i32, i64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
    lib.metrale_causal_conv1d.argtypes = [p, i32, p, p, p, p, i64, i64, i64, i64, p]
    lib.metrale_causal_conv1d.restype = ctypes.c_int
    lib.metrale_gated_delta_rule.argtypes = [p, i32, p, p, p, p, p, p, i64, i64, i64, i64, i64, i64, p]
    lib.metrale_gated_delta_rule.restype = ctypes.c_int


def _gdn_lib() -> ctypes.CDLL:
    return _declared("_metrale_gdn", _declare_gdn)


def _like(op: str, name: str, x: torch.Tensor, tensors: dict) -> None:
    if x.dtype not in _DTYPE_CODES:
        raise TypeError(f"{op} ({name}): x must be float32, float16 or bfloat16, found {x.dtype}")
    for tname, (t, dtype) in tensors.items():
        if t.device != x.device or t.dtype != (dtype or x.dtype):
            raise ValueError(f"{op} ({name}): {tname} is {t.dtype} on {t.device}, expected {dtype or x.dtype} on "
                             f"{x.device}")


def causal_conv1d_cuda(x, weight, conv_state, channels, kernel_size, family, name):
    op = "metrale::causal_conv1d"
    b, s, c = x.shape
    if c != channels or tuple(weight.shape) != (c, 1, kernel_size) or tuple(conv_state.shape) != (b, c, kernel_size - 1):
        raise ValueError(f"{op} ({name}): x {list(x.shape)}, weight {list(weight.shape)}, conv_state "
                         f"{list(conv_state.shape)} do not match channels={channels}, kernel_size={kernel_size}")
    _like(op, name, x, dict(weight=(weight, None), conv_state=(conv_state, None)))
    x, weight, conv_state = x.contiguous(), weight.contiguous(), conv_state.contiguous()
    y = torch.empty_like(x)
    state_out = torch.empty_like(conv_state)
    with torch.cuda.device(x.device):
        err = _gdn_lib().metrale_causal_conv1d(x.data_ptr(), _DTYPE_CODES[x.dtype], weight.data_ptr(),
                                               conv_state.data_ptr(), y.data_ptr(), state_out.data_ptr(), b, s, c,
                                               kernel_size, _stream(x.device))
    _check(err, op, name, f"batch={b} seq={s} channels={c} kernel_size={kernel_size} (at most 8 taps)")
    return y, state_out


def gated_delta_rule_cuda(x, ba, A_log, dt_bias, state, num_k_heads, num_v_heads, head_k_dim, head_v_dim, family,
                          name):
    op = "metrale::gated_delta_rule"
    b, s, width = x.shape
    hk, hv, dk, dv = num_k_heads, num_v_heads, head_k_dim, head_v_dim
    if width != 2 * hk * dk + hv * dv or tuple(ba.shape) != (b, s, 2 * hv) or tuple(state.shape) != (b, hv, dk, dv) \
            or tuple(A_log.shape) != (hv,) or tuple(dt_bias.shape) != (hv,):
        raise ValueError(f"{op} ({name}): x {list(x.shape)}, ba {list(ba.shape)}, state {list(state.shape)} do not "
                         f"match num_k_heads={hk}, num_v_heads={hv}, head_k_dim={dk}, head_v_dim={dv}")
    _like(op, name, x, dict(ba=(ba, None), A_log=(A_log, None), dt_bias=(dt_bias, None),
                            state=(state, torch.float32)))
    x, ba, A_log, dt_bias, state = (t.contiguous() for t in (x, ba, A_log, dt_bias, state))
    y = torch.empty((b, s, hv, dv), dtype=x.dtype, device=x.device)
    state_out = torch.empty_like(state)
    with torch.cuda.device(x.device):
        err = _gdn_lib().metrale_gated_delta_rule(x.data_ptr(), _DTYPE_CODES[x.dtype], ba.data_ptr(), A_log.data_ptr(),
                                                  dt_bias.data_ptr(), state.data_ptr(), y.data_ptr(),
                                                  state_out.data_ptr(), b, s, hk, hv, dk, dv, _stream(x.device))
    _check(err, op, name, f"batch={b} seq={s} heads={hk}/{hv} head_k_dim={dk} head_v_dim={dv} "
                          "(head_k_dim 64 or 128, head_v_dim a multiple of 32)")
    return y, state_out


torch.library.register_kernel("metrale::causal_conv1d", "cuda", causal_conv1d_cuda)
torch.library.register_kernel("metrale::gated_delta_rule", "cuda", gated_delta_rule_cuda)
