"""The metrale projection ops as torch custom ops (torch.library), namespace ``metrale``.

Each op has a CPU implementation (the reference of docs/ops.md, from the per-format modules) and a
fake implementation for tracing; ``metrale_export.ops.cuda`` registers the CUDA implementation
that calls the plugin kernels, and ``metrale_export.ops.onnx_translation`` maps each op to its
``metrale`` ONNX node. Invariants: the argument names and order here are the op contract's
inputs, then its attributes; optional inputs are ``None`` when absent.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import w4a4, w4a16, w8a8


@torch.library.custom_op("metrale::w4a16_proj", mutates_args=())
def w4a16_proj(
    x: Tensor,
    weight: Tensor,
    weight_scale: Tensor,
    zero_point: Optional[Tensor],
    bias: Optional[Tensor],
    n: int,
    k: int,
    group_size: int,
    activation_format: str,
    family: str,
    name: str,
) -> Tensor:
    return w4a16.proj(x, weight, weight_scale, zero_point, bias, group_size, activation_format)


@w4a16_proj.register_fake
def _w4a16_proj_fake(x, weight, weight_scale, zero_point, bias, n, k, group_size,
                     activation_format, family, name):
    return x.new_empty((x.shape[0], n))


@torch.library.custom_op("metrale::w8a8_proj", mutates_args=())
def w8a8_proj(
    x: Tensor,
    weight: Tensor,
    weight_scale: Tensor,
    bias: Optional[Tensor],
    n: int,
    k: int,
    weight_scale_granularity: str,
    activation_format: str,
    activation_scale_granularity: str,
    family: str,
    name: str,
) -> Tensor:
    return w8a8.proj(x, weight, weight_scale, bias, weight_scale_granularity, activation_format,
                     activation_scale_granularity)


@w8a8_proj.register_fake
def _w8a8_proj_fake(x, weight, weight_scale, bias, n, k, weight_scale_granularity,
                    activation_format, activation_scale_granularity, family, name):
    return x.new_empty((x.shape[0], n))


@torch.library.custom_op("metrale::w4a4_proj", mutates_args=())
def w4a4_proj(
    x: Tensor,
    weight: Tensor,
    weight_scale: Tensor,
    weight_global_scale: Tensor,
    input_scale: Optional[Tensor],
    bias: Optional[Tensor],
    n: int,
    k: int,
    activation_format: str,
    family: str,
    name: str,
) -> Tensor:
    return w4a4.proj(x, weight, weight_scale, weight_global_scale, input_scale, bias,
                     activation_format)


@w4a4_proj.register_fake
def _w4a4_proj_fake(x, weight, weight_scale, weight_global_scale, input_scale, bias, n, k,
                    activation_format, family, name):
    return x.new_empty((x.shape[0], n))
