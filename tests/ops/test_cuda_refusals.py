"""The CUDA ops (metrale_export.ops.cuda) refuse an activation format their op does not have, naming
the op, the projection and the contract's formats, before any GPU or kernel-library use (so this
runs on the CPU)."""

from __future__ import annotations

import pytest
import torch

from metrale_export import contract
from metrale_export.ops import cuda

# (CUDA implementation, its op type, the arguments after x up to activation_format)
_DENSE = {
    "W4A16Proj": (cuda.w4a16_proj_cuda, (None, None, None, None, 8, 32, 32)),
    "W8A8Proj": (cuda.w8a8_proj_cuda, (None, None, None, None, 8, 32, "channel")),
    "W4A4Proj": (cuda.w4a4_proj_cuda, (None, None, None, None, None, 8, 32)),
}


@pytest.mark.parametrize("op_type", sorted(_DENSE))
def test_dense_cuda_op_refuses_a_format_outside_the_contract(op_type):
    fn, args = _DENSE[op_type]
    spec = contract.op(op_type)
    refused = next(f for f in contract.ACTIVATION_FORMATS if f not in spec.activation_formats)
    tail = ("row",) if op_type == "W8A8Proj" else ()
    with pytest.raises(ValueError) as e:
        fn(torch.zeros(2, 32), *args, refused, *tail, "ffn", "layers.0.mlp.up_proj")
    formats = " or ".join(spec.activation_formats)
    runs = f"only {formats}" if len(spec.activation_formats) == 1 else formats
    assert str(e.value) == (f"metrale::{spec.torch_name} (layers.0.mlp.up_proj): runs {runs} activations, "
                            f"asked for {refused!r}")


@pytest.mark.parametrize("op_type", sorted(contract.OPS))
def test_each_cuda_op_runs_exactly_its_contract_formats(op_type):
    spec = contract.op(op_type)
    for fmt in spec.activation_formats:
        assert cuda.library._runs(spec, "p", fmt) == f"metrale::{spec.torch_name}"
    with pytest.raises(ValueError, match=rf"^metrale::{spec.torch_name} \(p\): runs .* activations, asked for 'int8'$"):
        cuda.library._runs(spec, "p", "int8")
