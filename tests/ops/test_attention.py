"""The Attention op's CPU reference (metrale_export/ops/attention.py) against a float64 evaluation,
its invariances (batch, prefill chunking, decode) and the kernel's constants against the contract."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from metrale_export import contract
from metrale_export.ops import attention as A

ROOT = Path(__file__).resolve().parents[2]


def _inputs(b, hq, hkv, s, t, d, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, s, d, generator=g).to(dtype)
    k = torch.randn(b, hkv, t, d, generator=g).to(dtype)
    v = torch.randn(b, hkv, t, d, generator=g).to(dtype)
    return q, k, v


@pytest.mark.parametrize("b,hq,hkv,s,t,d", [
    (1, 4, 2, 1, 1, 64),       # decode of the first token
    (2, 4, 2, 3, 3, 64),       # prefill, no past
    (1, 8, 2, 7, 300, 64),     # chunked prefill over a past crossing a chunk boundary
    (2, 2, 2, 70, 70, 128),    # a partial second block
    (1, 4, 1, 1, 1000, 128),   # decode over four chunks
    (1, 2, 1, 5, 600, 256),
])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_reference_within_bound_of_float64(b, hq, hkv, s, t, d, dtype):
    q, k, v = _inputs(b, hq, hkv, s, t, d, dtype)
    scale = A.default_scale(d)
    ref = A.attention_reference(q, k, v, scale)
    assert ref.shape == (b, s, hq, d) and ref.dtype == dtype
    exact = A.attention_float64(q, k, v, scale)
    err = (ref.to(torch.float64) - exact).abs()
    bnd = A.bound(q, k, v, scale)
    assert bool((err <= bnd).all()), f"max error {err.max().item():.3g}"
    # Not vacuous: the bound is well below the outputs' size.
    assert bnd.mean().item() < 0.25 * exact.abs().mean().item()


def test_reference_bound_catches_a_swapped_kv_head():
    q, k, v = _inputs(1, 4, 2, 5, 40, 64)
    exact = A.attention_float64(q, k, v, 0.125)
    swapped = A.attention_reference(q, k.flip(1), v.flip(1), 0.125)
    err = (swapped.to(torch.float64) - exact).abs()
    assert bool((err > A.bound(q, k, v, 0.125)).any())


def test_masked_keys_are_ignored():
    """Keys after a query's position (and their values) never change its output."""
    q, k, v = _inputs(1, 4, 2, 9, 9, 64)
    ref = A.attention_reference(q, k, v, 0.125)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 5:] = 1e4
    v2[:, :, 5:] = -7.0
    ref2 = A.attention_reference(q, k2, v2, 0.125)
    assert torch.equal(ref[:, :5], ref2[:, :5])
    assert not torch.equal(ref[:, 5:], ref2[:, 5:])


def test_reference_prefill_chunks_and_decode_give_the_same_bits():
    """A token's bits do not depend on how its sequence was split: one prefill, chunks of 1, 7, 64,
    and decode token by token (the reference follows the op's per-row order)."""
    s, d = 150, 64
    q, k, v = _inputs(1, 4, 2, s, s, d)
    full = A.attention_reference(q, k, v, 0.125)
    for chunk in (1, 7, 64):
        parts = [A.attention_reference(q[:, :, i:i + chunk], k[:, :, :i + chunk], v[:, :, :i + chunk], 0.125)
                 for i in range(0, s, chunk)]
        assert torch.equal(torch.cat(parts, dim=1), full), f"chunk {chunk}"


def test_reference_row_does_not_depend_on_the_batch():
    q, k, v = _inputs(5, 4, 2, 3, 260, 64)
    batched = A.attention_reference(q, k, v, 0.125)
    for i in range(5):
        alone = A.attention_reference(q[i:i + 1], k[i:i + 1], v[i:i + 1], 0.125)
        assert torch.equal(alone[0], batched[i])


def test_quad_row_sum_order():
    """The block's row sum adds lane j's keys 8t + 2j, 8t + 2j + 1 from the left, then the lanes
    pairwise; float32 addition is not associative, so another order gives other bits somewhere."""
    g = torch.Generator().manual_seed(3)
    p = torch.rand(4096, 64, generator=g) * torch.exp2(torch.randint(-20, 0, (4096, 64), generator=g).float())
    got = A._quad_row_sum(p)
    for r in (0, 1, 4095):
        lanes = []
        for j in range(4):
            acc = None
            for t in range(8):
                for e in range(2):
                    x = p[r, 8 * t + 2 * j + e]
                    acc = x if acc is None else acc + x
            lanes.append(acc)
        assert torch.equal(got[r], (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]))
    assert not torch.equal(got, p.sum(dim=-1))


def test_scale_log2_is_rounded_once():
    s = 128 ** -0.5
    c = contract.attention_scale_log2(s)
    assert c == float(torch.tensor(float(torch.tensor(s, dtype=torch.float32)) * contract.LOG2E, dtype=torch.float32))
    assert abs(c - s * contract.LOG2E) < 1e-7


def test_shape_errors_name_the_problem():
    q, k, v = _inputs(1, 3, 2, 1, 4, 64)
    with pytest.raises(ValueError, match="not a multiple of kv_heads"):
        A.attention_reference(q, k, v, 0.125)
    q, k, v = _inputs(1, 4, 2, 5, 4, 64)
    with pytest.raises(ValueError, match="fewer than the 5 queries"):
        A.attention_reference(q, k, v, 0.125)


def test_kernel_constants_follow_the_contract():
    src = (ROOT / "plugins" / "attention" / "attentionKernel.cuh").read_text()
    found = {name: int(val) for name, val in re.findall(r"constexpr int (k\w+) = (\d+);", src)}
    assert found["kBLOCK_KEYS"] == contract.ATTENTION_BLOCK_KEYS
    assert found["kCHUNK_BLOCKS"] == contract.ATTENTION_CHUNK_BLOCKS
    launcher = (ROOT / "plugins" / "attention" / "attentionKernel.cu").read_text()
    dims = sorted(int(x) for x in re.findall(r"head_dim != (\d+)", launcher))
    assert tuple(dims) == contract.ATTENTION_HEAD_DIMS


@pytest.mark.parametrize("head_dim", [64, 128])
def test_onnx_runtime_op_gets_the_exact_scale(head_dim):
    """The ONNX Runtime op runs the reference with the node's float32 scale, not a 7-digit copy of
    it (onnxruntime-extensions' float attributes): same bits as the reference called directly.
    Qwen3-8B's head_dim 128 gives 128 ** -0.5, which 7 digits do not hold (64 gives 0.125)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from metrale_export.ops.ort import reference_session

    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(2, 4, 7, head_dim, generator=g) * 3
    k, v = (torch.randn(2, 2, 7, head_dim, generator=g) * 3 for _ in range(2))
    scale = A.default_scale(head_dim)
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], domain=contract.DOMAIN, q_heads=4, kv_heads=2,
                            head_dim=head_dim, scale=scale, family="attn")
    node.attribute.append(helper.make_attribute("name", "t"))  # make_node's name= is the node's
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(t.shape))
                                            for n, t in (("q", q), ("k", k), ("v", v))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(contract.DOMAIN, contract.domain_version())])
    got = reference_session(model, threads=1).run(None, {"q": q.numpy(), "k": k.numpy(), "v": v.numpy()})[0]
    stored = onnx.helper.get_attribute_value(node.attribute[[a.name for a in node.attribute].index("scale")])
    assert np.array_equal(got, A.attention_reference(q, k, v, stored).numpy())
