"""The ONNX Runtime reference graph (ops/ort.py): bfloat16 weights reach the Python ops as their
bits, with no float32 copy in the graph, and give the reference's result bit for bit; a bfloat16
value computed in the graph is widened and gives the same."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

from metrale_export import contract
from metrale_export.ops import float_proj, ort as mort
from tests.support.graphs import Proj, projection_graph, reference


def _float_proj_graph(weight: torch.Tensor, computed: bool) -> onnx.ModelProto:
    """x [M, K] -> FloatProj(weight) -> y; ``computed``: the bf16 weight is a Cast of a float32
    initializer instead of a bf16 initializer."""
    n, k = weight.shape
    nodes = []
    if computed:
        init = numpy_helper.from_array(weight.float().numpy(), "w_f32")
        nodes.append(helper.make_node("Cast", ["w_f32"], ["w"], to=TensorProto.BFLOAT16))
    else:
        init = numpy_helper.from_array(weight.view(torch.int16).numpy().view(ml_dtypes.bfloat16), "w")
    node = helper.make_node("FloatProj", ["x", "w"], ["y"], domain=contract.DOMAIN)
    node.attribute.extend(helper.make_attribute(a, v) for a, v in
                          {"n": n, "k": k, "family": "head", "name": "lm_head", "has_bias": 0}.items())
    nodes.append(node)
    graph = helper.make_graph(nodes, "fp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])], [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(contract.DOMAIN, contract.domain_version())])
    model.ir_version = 10
    return model


def _casts_of_initializers(model: onnx.ModelProto) -> list[str]:
    inits = {t.name for t in model.graph.initializer}
    return [n.input[0] for n in model.graph.node if n.op_type == "Cast" and n.input[0] in inits]


def test_bf16_weights_reach_the_op_as_bits_not_widened():
    """A bf16 weight (an 8B lm_head: 1.2 GB) is read as its own bytes: no Cast to float32 (2.5 GB
    and a second 2.5 GB copy handed to the Python op) and no second initializer left beside it."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(40, 96, generator=g).bfloat16()
    ref = mort.to_reference_graph(_float_proj_graph(w, computed=False))
    assert _casts_of_initializers(ref) == []
    (init,) = ref.graph.initializer
    assert (init.name, init.data_type) == ("w__bits", TensorProto.INT16)
    assert np.array_equal(numpy_helper.to_array(init), w.view(torch.int16).numpy())
    x = torch.randn(7, 96, generator=g)
    got = mort.reference_session(_float_proj_graph(w, computed=False)).run(None, {"x": x.numpy()})[0]
    assert np.array_equal(got, float_proj.proj(x, w, None).numpy())


def test_a_computed_bf16_weight_is_widened_and_gives_the_same():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(24, 64, generator=g).bfloat16()
    x = torch.randn(5, 64, generator=g)
    model = _float_proj_graph(w, computed=True)
    assert any(n.op_type.endswith("__widened") for n in mort.to_reference_graph(model).graph.node)
    got = mort.reference_session(model).run(None, {"x": x.numpy()})[0]
    assert np.array_equal(got, float_proj.proj(x, w, None).numpy())


def test_w4a16_bf16_scales_as_bits():
    chain = projection_graph(256, [Proj("W4A16Proj", 48, options={"group_size": 64, "symmetric": False})])
    ref = mort.to_reference_graph(chain.model)
    assert _casts_of_initializers(ref) == []
    assert {t.name for t in ref.graph.initializer if t.data_type == TensorProto.INT16} == {
        "layers.0.ffn.w4a16proj.weight_scale__bits"}
    x = torch.randn(9, 256, generator=torch.Generator().manual_seed(2))
    got = mort.reference_session(chain.model).run(None, {"x": x.numpy()})[0]
    assert np.array_equal(got, reference(chain, x).numpy())
