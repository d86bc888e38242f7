"""Float weights in the checkpoint's dtype (bfloat16) in the graph an engine is built from, and the
numbers the engine manifest states (weight bytes, decode bytes per token, state bytes)."""

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from metrale_export.engines import lowering
from metrale_export.engines.weights import float_weights_in_bf16, footprint, numbers, state_bytes, tensor_bytes

V, H = 64, 32


def _bf16_exact(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(ml_dtypes.bfloat16).astype(np.float32)


def _head_graph(tied=False, bias=False, exact=True):
    """ids -> Gather(embedding) -> Mul(norm) -> Gemm(lm_head, transB) [+ bias] -> logits."""
    emb = _bf16_exact(V, H, seed=1)
    head = emb if tied else _bf16_exact(V, H, seed=2)
    if not exact:
        head = head + np.float32(1e-4)  # not representable in bfloat16
    inits = [numpy_helper.from_array(emb, "embed.weight"), numpy_helper.from_array(_bf16_exact(H, seed=3), "norm.weight")]
    if not tied:
        inits.append(numpy_helper.from_array(head, "lm_head.weight"))
    gemm_in = ["hn", "embed.weight" if tied else "lm_head.weight"]
    if bias:
        inits.append(numpy_helper.from_array(np.linspace(-1, 1, V, dtype=np.float32), "lm_head.bias"))
        gemm_in.append("lm_head.bias")
    nodes = [helper.make_node("Gather", ["embed.weight", "ids"], ["h"], name="embed"),
             helper.make_node("Mul", ["h", "norm.weight"], ["hn"], name="norm"),
             helper.make_node("Gemm", gemm_in, ["logits"], name="lm_head", transB=1)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("ids", TensorProto.INT64, ["M"])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["M", V])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


IDS = {"ids": np.array([0, 5, 7, 63])}


@pytest.mark.parametrize("tied, bias", [(False, False), (True, False), (False, True)])
def test_exact_float_weights_become_bfloat16(tied, bias):
    model = _head_graph(tied=tied, bias=bias)
    expected = ReferenceEvaluator(model).run(None, IDS)[0]
    embedded = ReferenceEvaluator(model).run(["h"], IDS)[0]
    out, converted = float_weights_in_bf16(onnx.ModelProto.FromString(model.SerializeToString()))
    onnx.checker.check_model(out, full_check=True)
    assert converted == (["embed.weight"] if tied else ["embed.weight", "lm_head.weight"])
    dtypes = {t.name: t.data_type for t in out.graph.initializer}
    # the float32 originals are gone; the norm (a Mul operand) and the bias stay float32
    assert dtypes.pop("norm.weight") == TensorProto.FLOAT
    if bias:
        assert dtypes.pop("lm_head.bias") == TensorProto.FLOAT
    assert set(dtypes.values()) == {TensorProto.BFLOAT16} and len(dtypes) == len(converted)
    for name in converted:
        original = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))
        stored = numpy_helper.to_array(next(t for t in out.graph.initializer if t.name == f"{name}.bf16"))
        assert np.array_equal(stored.astype(np.float32), original)  # the same values, half the bytes
    got = ReferenceEvaluator(out)
    # The embedding rows are the same numbers; the lm_head runs in bfloat16: its operand and its
    # result are rounded to bfloat16 (2^-8 relative at most each, in that order).
    assert np.array_equal(got.run(["h"], IDS)[0], embedded)
    logits = got.run(None, IDS)[0]
    assert logits.dtype == np.float32 and logits.shape == expected.shape
    scale = np.abs(embedded).max() * np.abs(numpy_helper.to_array(model.graph.initializer[0])).max() * H
    assert np.abs(logits - expected).max() <= 2 * 2**-8 * scale
    assert not np.array_equal(logits, expected)  # it did run in bfloat16


def test_inexact_weights_stay_float32():
    out, converted = float_weights_in_bf16(_head_graph(exact=False))
    assert converted == ["embed.weight"]
    assert {t.name: t.data_type for t in out.graph.initializer}["lm_head.weight"] == TensorProto.FLOAT


def test_footprint_counts_what_is_stored_and_read():
    model, _ = float_weights_in_bf16(_head_graph())
    n = footprint(model)
    stored = {t.name: len(t.raw_data) for t in model.graph.initializer}
    assert n["weights"]["bytes"] == sum(stored.values())
    assert n["weights"]["by_dtype"] == {"bfloat16": 2 * V * H * 2, "float": H * 4}
    # a decode token reads one embedding row, the whole lm_head and the norm
    assert n["decode_bytes_per_token"] == H * 2 + V * H * 2 + H * 4
    int4 = helper.make_tensor("w", TensorProto.INT4, [3, 5], np.zeros(15, np.int8), raw=False)
    assert tensor_bytes(int4) == 8


def test_numbers_of_a_demo_export_match_its_weights(demo_exports):
    """The lowered demo export: numbers against the initializers counted independently."""
    model = lowering.lower_qdq(onnx.load(demo_exports["w4a16"] / "model.onnx"))
    before = {t.name: (t.data_type, len(t.raw_data)) for t in model.graph.initializer}
    model, converted = float_weights_in_bf16(model)
    # The lm_head is a FloatProj: its qdq expansion's float32 weight (named by the node,
    # lm_head/w_*) goes back to bf16 exactly.
    assert "model.embed_tokens.weight" in converted
    assert [c for c in converted if c.startswith("lm_head/w_")]
    n = numbers(model)
    after = {t.name: len(t.raw_data) for t in model.graph.initializer}
    assert n["weights"]["bytes"] == sum(after.values())
    saved = sum(before[c][1] for c in converted) // 2
    assert n["weights"]["bytes"] == sum(b for _, b in before.values()) - saved
    embedding = after["model.embed_tokens.weight.bf16"]
    assert n["decode_bytes_per_token"] == n["weights"]["bytes"] - embedding + embedding // 512
    # demo: 2 layers, 2 KV heads x 64 (float32 key and value) per position; no fixed state
    assert n["kv_cache_bytes_per_position"] == 2 * 2 * (2 * 64 * 4)
    assert n["fixed_state_bytes"] == 0


def test_state_bytes_of_gdn_states():
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
              helper.make_tensor_value_info("conv_state.0", TensorProto.FLOAT, ["batch", 512, 3]),
              helper.make_tensor_value_info("recurrent_state.0", TensorProto.FLOAT, ["batch", 4, 64, 64]),
              helper.make_tensor_value_info("past_key.1", TensorProto.BFLOAT16, ["batch", 2, "past", 64])]
    model = helper.make_model(helper.make_graph([], "s", inputs, []))
    assert state_bytes(model) == {"kv_cache_bytes_per_position": 2 * 64 * 2,
                                  "fixed_state_bytes": (512 * 3 + 4 * 64 * 64) * 4}
