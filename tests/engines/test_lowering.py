"""The qdq lowering runs in ONNX Runtime and matches the CPU reference ops; the format rewrite."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from metrale_export import contract
from metrale_export.engines.lowering import (
    LoweringError,
    lower_qdq,
    metrale_ops,
    with_activation_formats,
)
from metrale_export.ops import tolerances
from support.graphs import Proj, projection_graph, reference

ROWS = (1, 3, 7, 31, 1000)

# docs/ops.md, Tolerances (float32 output): fp8 allows for float32 reassociation of the scales.
TOL = {"bf16": 1e-5, "nvfp4": 1e-5, "fp8": 1e-4}

CASES = {
    "w4a16-g32": (128, [Proj("W4A16Proj", 48, options={"group_size": 32})]),
    "w4a16-zp-g64-bias": (192, [Proj("W4A16Proj", 40, bias=True,
                                     options={"group_size": 64, "symmetric": False})]),
    "w4a16-g128": (256, [Proj("W4A16Proj", 24, options={"group_size": 128})]),
    # K = 400 and 98: a partial last group (op version 2), padded to whole blocks by the lowering.
    "w4a16-g128-partial": (400, [Proj("W4A16Proj", 24, options={"group_size": 128})]),
    "w4a16-zp-g32-partial-bias": (98, [Proj("W4A16Proj", 40, bias=True,
                                            options={"group_size": 32, "symmetric": False})]),
    "w8a8-channel-fp8": (100, [Proj("W8A8Proj", 40)]),
    "w8a8-channel-bf16-bias": (100, [Proj("W8A8Proj", 40, activation_format="bf16", bias=True)]),
    "w8a8-block-rowblock": (200, [Proj("W8A8Proj", 136, options={
        "granularity": "block128", "activation_scale_granularity": "row_block128"})]),
    "w8a8-block-row": (200, [Proj("W8A8Proj", 72, options={"granularity": "block128"})]),
    # The static scale (op version 2), small enough that the x2.0 inputs saturate some elements.
    "w8a8-channel-static-bias": (100, [Proj("W8A8Proj", 40, bias=True, options={"input_scale": 0.01})]),
    "w8a8-block-static": (200, [Proj("W8A8Proj", 72, options={"granularity": "block128", "input_scale": 0.004})]),
    "w4a4-nvfp4": (112, [Proj("W4A4Proj", 48)]),
    "w4a4-nvfp4-static-bias": (112, [Proj("W4A4Proj", 48, bias=True, options={"input_scale": 0.002})]),
    "w4a4-bf16": (112, [Proj("W4A4Proj", 48, activation_format="bf16")]),
}


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _rel(y, ref) -> float:
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("case", sorted(CASES))
def test_lowered_matches_reference(case):
    k, projs = CASES[case]
    chain = projection_graph(k, projs, seed=3)
    lowered = lower_qdq(chain.model)
    onnx.checker.check_model(lowered, full_check=True)
    assert not [n for n in lowered.graph.node if n.domain == contract.DOMAIN]
    session = _session(lowered)
    fmt = chain.layers[0][3]
    for m in ROWS:
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)) * 2.0
        x[0, :5] = 0.0  # zeros inside a row
        y = session.run(None, {"x": x.numpy()})[0]
        ref = reference(chain, x).numpy()
        assert y.shape == ref.shape == (m, projs[-1].n)
        assert _rel(y, ref) <= TOL[fmt], f"{case}: {m} rows: relative error {_rel(y, ref):.2e}"


def test_graph_of_an_older_op_contract_is_refused():
    # A version-1 graph (metrale opset 1: W4A16Proj with float32 scales) is never read as version 2.
    chain = projection_graph(128, [Proj("W4A16Proj", 16)], seed=1)
    for o in chain.model.opset_import:
        if o.domain == contract.DOMAIN:
            o.version = 1
    with pytest.raises(LoweringError, match="contract version 1 .*re-export"):
        lower_qdq(chain.model)


@pytest.mark.parametrize("old", [1, 2])
def test_w8a8_graph_of_version_1_or_2_is_refused_by_every_reader(old):
    # W8A8Proj version 3 multiplies on the FP8 tensor core: a graph of version 1 or 2 (exact f16
    # products) is refused in one line that says to re-export, by the lowering, the engine policy's
    # node list and the ONNX Runtime reference alike; the same graph at opset 3 is read.
    from metrale_export.errors import InputError
    from metrale_export.ops import ort as ort_reference

    chain = projection_graph(128, [Proj("W8A8Proj", 16)], seed=1)
    assert len(metrale_ops(chain.model)) == 1
    for o in chain.model.opset_import:
        if o.domain == contract.DOMAIN:
            o.version = old
    want = f"W8A8Proj of metrale op contract version {old} \\(exact f16 products.*re-export"
    with pytest.raises(LoweringError, match=want):
        lower_qdq(chain.model)
    with pytest.raises(LoweringError, match=want):
        metrale_ops(chain.model)
    with pytest.raises(InputError, match=want):
        ort_reference.to_reference_graph(chain.model)


def test_zero_rows_stay_finite():
    chain = projection_graph(64, [Proj("W4A4Proj", 16), Proj("W8A8Proj", 16)], seed=5)
    y = _session(lower_qdq(chain.model)).run(None, {"x": np.zeros((3, 64), np.float32)})[0]
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(y, reference(chain, torch.zeros(3, 64)).numpy())


def test_chain_with_formats_chosen_per_op():
    chain = projection_graph(128, [Proj("W4A16Proj", 96, family="attn"), Proj("W8A8Proj", 64),
                                   Proj("W4A4Proj", 32, family="head")], seed=7)
    keys = [op.key for op in metrale_ops(chain.model)]
    formats = {keys[0]: "bf16", keys[1]: "bf16", keys[2]: "bf16"}
    lowered = lower_qdq(chain.model, formats)
    x = torch.randn(31, 128, generator=torch.Generator().manual_seed(0))
    y = _session(lowered).run(None, {"x": x.numpy()})[0]
    assert _rel(y, reference(chain, x, formats).numpy()) <= 1e-5
    # Different from the declared formats: the choice is honoured, not ignored.
    assert _rel(y, reference(chain, x).numpy()) > 1e-4


def test_weights_keep_their_quantized_types():
    chain = projection_graph(128, [Proj("W4A16Proj", 32), Proj("W8A8Proj", 32), Proj("W4A4Proj", 32)])
    lowered = lower_qdq(chain.model)
    types = {onnx.TensorProto.DataType.Name(t.data_type) for t in lowered.graph.initializer
             if len(t.dims) == 2 and t.dims[0] * t.dims[1] >= 32 * 32}
    assert {"INT4", "FLOAT8E4M3FN"} <= types
    assert {o.domain: o.version for o in lowered.opset_import}[""] >= 21
    assert contract.DOMAIN not in {o.domain for o in lowered.opset_import}


def test_refuses_formats_outside_the_contract():
    chain = projection_graph(64, [Proj("W4A16Proj", 16)])
    key = metrale_ops(chain.model)[0].key
    with pytest.raises(LoweringError, match="'fp8' is not in the op contract's table"):
        lower_qdq(chain.model, {key: "fp8"})
    with pytest.raises(LoweringError, match="no activation format chosen"):
        lower_qdq(chain.model, {})


def test_bad_weight_shape_names_the_tensor():
    chain = projection_graph(64, [Proj("W8A8Proj", 16)])
    scale = next(t for t in chain.model.graph.initializer if t.name.endswith("weight_scale"))
    scale.CopyFrom(onnx.numpy_helper.from_array(np.ones(8, np.float32), scale.name))
    with pytest.raises(LoweringError, match=r"weight_scale: expected shape \[16\], found \[8\]"):
        lower_qdq(chain.model)


def test_with_activation_formats_rewrites_a_copy():
    chain = projection_graph(64, [Proj("W8A8Proj", 16), Proj("W4A4Proj", 16)])
    keys = [op.key for op in metrale_ops(chain.model)]
    rewritten = with_activation_formats(chain.model, {keys[0]: "bf16", keys[1]: "bf16"})
    assert [op.activation_format for op in metrale_ops(rewritten)] == ["bf16", "bf16"]
    assert [op.activation_format for op in metrale_ops(chain.model)] == ["fp8", "nvfp4"]


def _float_edges(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with a float32 input and output around its bfloat16 ``x`` and ``y``."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for node in g.node:
        node.input[:] = ["x_bf16" if i == "x" else i for i in node.input]
        node.output[:] = ["y_bf16" if o == "y" else o for o in node.output]
    g.node.insert(0, onnx.helper.make_node("Cast", ["x"], ["x_bf16"], to=onnx.TensorProto.BFLOAT16))
    g.node.append(onnx.helper.make_node("Cast", ["y_bf16"], ["y"], to=onnx.TensorProto.FLOAT))
    g.input[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    g.output[0].type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    return m


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_activations_keep_their_dtype(dtype):
    onnx_type = {"float16": onnx.TensorProto.FLOAT16, "bfloat16": onnx.TensorProto.BFLOAT16}[dtype]
    chain = projection_graph(128, [Proj("W4A16Proj", 64), Proj("W8A8Proj", 48), Proj("W4A4Proj", 32)],
                             seed=9, dtype=onnx_type)
    lowered = lower_qdq(chain.model)
    x = torch.randn(7, 128, generator=torch.Generator().manual_seed(1)).to(getattr(torch, dtype))
    ref = reference(chain, x)
    assert ref.dtype == x.dtype
    if dtype == "bfloat16":  # ONNX Runtime takes no bfloat16 numpy arrays: cast at the edges
        lowered = _float_edges(lowered)
        feed = x.float().numpy()  # exact: the values are bfloat16 values
    else:
        feed = x.numpy()
    y = _session(lowered).run(None, {"x": feed})[0]
    assert y.dtype == feed.dtype
    assert _rel(y.astype(np.float32), ref.float().numpy()) <= tolerances.op_output_bound(dtype)


@pytest.mark.slow
@pytest.mark.parametrize("weights", ["w4a16", "w8a8", "w4a4"])
def test_lowered_demo_export_matches_the_reference_ops(weights, demo_exports):
    """A real export: ONNX Runtime on the qdq graph vs on the metrale graph (reference ops)."""
    import json

    from metrale_export.ops.ort import reference_session

    export_dir = demo_exports[weights]
    manifest = json.loads((export_dir / "manifest.json").read_text())
    lowered = lower_qdq(onnx.load(export_dir / "model.onnx"))
    reference, qdq = reference_session(export_dir / "model.onnx"), _session(lowered)
    rng = np.random.default_rng(0)
    for batch, seq, past in ((2, 7, 0), (3, 1, 9)):
        dims = {"batch": batch, "seq": seq, "past": past}
        feeds = {}
        for inp in manifest["inputs"]:
            shape = [dims.get(d, d) for d in inp["shape"]]
            if inp["name"] == "input_ids":
                feeds[inp["name"]] = rng.integers(0, manifest["model"]["vocab_size"], shape)
            elif inp["name"] == "position_ids":
                feeds[inp["name"]] = np.broadcast_to(np.arange(past, past + seq), shape).copy()
            else:
                feeds[inp["name"]] = rng.uniform(-1, 1, shape).astype(inp["dtype"])
        names = [o.name for o in reference.get_outputs()]
        for name, a, b in zip(names, reference.run(None, feeds), qdq.run(names, feeds)):
            # docs/ops.md: whole models within MODEL_QUANTIZED (a bf16/fp8/fp4 rounding may flip downstream).
            assert _rel(b, a) <= tolerances.MODEL_QUANTIZED, f"{weights} {dims} {name}: {_rel(b, a):.2e}"


def test_grouped_expert_ops_are_refused_with_the_reason():
    """The qdq lowering cannot express routing without data-dependent shapes or every expert on
    every row: it refuses, says why and names the dense export that lowers."""
    from metrale_export.engines.lowering import LoweringError, lower_qdq

    node = onnx.helper.make_node(
        "W8A8MoEProj", ["x", "ids", "w", "s"], ["y"], domain=contract.DOMAIN, n=8, k=16, num_experts=4, top_k=2,
        combine=0, has_bias=0, weight_scale_granularity="channel", activation_format="fp8",
        activation_scale_granularity="row", family="moe", name="model.layers.0.mlp.experts.up_proj")
    graph = onnx.helper.make_graph(
        [node], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["m", 16]),
         onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT32, ["m", 2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["m", 2, 8])],
        [onnx.numpy_helper.from_array(np.zeros((4, 8, 16), np.int8), "w"),
         onnx.numpy_helper.from_array(np.ones((4, 8), np.float32), "s")])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 20),
                                                         onnx.helper.make_opsetid(contract.DOMAIN, 1)])
    with pytest.raises(LoweringError) as e:
        lower_qdq(model)
    msg = str(e.value)
    assert "model.layers.0.mlp.experts.up_proj (W8A8MoEProj)" in msg and "--moe-experts dense" in msg
