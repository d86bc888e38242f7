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

from . import moe, w4a4, w4a16, w8a8


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


# --- the grouped-expert ops (docs/ops.md, "Grouped-expert ops"; reference in ops/moe.py) --------

def _moe_out(x, n, top_k, combine):
    return x.new_empty((x.shape[0], n) if combine else (x.shape[0], top_k, n))


@torch.library.custom_op("metrale::w4a16_moe_proj", mutates_args=())
def w4a16_moe_proj(
    x: Tensor,
    topk_ids: Tensor,
    topk_weights: Optional[Tensor],
    weight: Tensor,
    weight_scale: Tensor,
    zero_point: Optional[Tensor],
    bias: Optional[Tensor],
    n: int,
    k: int,
    num_experts: int,
    top_k: int,
    combine: int,
    group_size: int,
    activation_format: str,
    family: str,
    name: str,
) -> Tensor:
    return moe.moe_proj("W4A16MoEProj", x, topk_ids, topk_weights,
                        dict(weight=weight, weight_scale=weight_scale, zero_point=zero_point, bias=bias),
                        dict(n=n, k=k, num_experts=num_experts, top_k=top_k, combine=combine,
                             group_size=group_size, activation_format=activation_format, name=name))


@w4a16_moe_proj.register_fake
def _w4a16_moe_proj_fake(x, topk_ids, topk_weights, weight, weight_scale, zero_point, bias, n, k,
                         num_experts, top_k, combine, group_size, activation_format, family, name):
    return _moe_out(x, n, top_k, combine)


@torch.library.custom_op("metrale::w8a8_moe_proj", mutates_args=())
def w8a8_moe_proj(
    x: Tensor,
    topk_ids: Tensor,
    topk_weights: Optional[Tensor],
    weight: Tensor,
    weight_scale: Tensor,
    bias: Optional[Tensor],
    n: int,
    k: int,
    num_experts: int,
    top_k: int,
    combine: int,
    weight_scale_granularity: str,
    activation_format: str,
    activation_scale_granularity: str,
    family: str,
    name: str,
) -> Tensor:
    return moe.moe_proj("W8A8MoEProj", x, topk_ids, topk_weights,
                        dict(weight=weight, weight_scale=weight_scale, bias=bias),
                        dict(n=n, k=k, num_experts=num_experts, top_k=top_k, combine=combine,
                             weight_scale_granularity=weight_scale_granularity,
                             activation_format=activation_format,
                             activation_scale_granularity=activation_scale_granularity, name=name))


@w8a8_moe_proj.register_fake
def _w8a8_moe_proj_fake(x, topk_ids, topk_weights, weight, weight_scale, bias, n, k, num_experts, top_k,
                        combine, weight_scale_granularity, activation_format, activation_scale_granularity,
                        family, name):
    return _moe_out(x, n, top_k, combine)


@torch.library.custom_op("metrale::w4a4_moe_proj", mutates_args=())
def w4a4_moe_proj(
    x: Tensor,
    topk_ids: Tensor,
    topk_weights: Optional[Tensor],
    weight: Tensor,
    weight_scale: Tensor,
    weight_global_scale: Tensor,
    input_scale: Optional[Tensor],
    bias: Optional[Tensor],
    n: int,
    k: int,
    num_experts: int,
    top_k: int,
    combine: int,
    activation_format: str,
    family: str,
    name: str,
) -> Tensor:
    return moe.moe_proj("W4A4MoEProj", x, topk_ids, topk_weights,
                        dict(weight=weight, weight_scale=weight_scale, weight_global_scale=weight_global_scale,
                             input_scale=input_scale, bias=bias),
                        dict(n=n, k=k, num_experts=num_experts, top_k=top_k, combine=combine,
                             activation_format=activation_format, name=name))


@w4a4_moe_proj.register_fake
def _w4a4_moe_proj_fake(x, topk_ids, topk_weights, weight, weight_scale, weight_global_scale, input_scale,
                        bias, n, k, num_experts, top_k, combine, activation_format, family, name):
    return _moe_out(x, n, top_k, combine)
