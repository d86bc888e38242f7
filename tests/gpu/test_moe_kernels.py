"""GPU tests of the grouped-expert kernels (plugins/moeProj/) through metrale_export.ops.cuda.

Per weight format and activation format, E experts made like test_proj_kernels' layers:
- per expert, bitwise the dense kernel: a (row, slot) routed to expert e equals the dense op of e on
  that row (combine=0), and the combine equals docs/ops.md's float32 sum of the dense outputs in
  ascending expert id (combine=1), into NaN-poisoned outputs. W8A8MoEProj is at version 2 (exact f16
  products: its grouped kernel has no FP8 wgmma tier yet), so its dense counterpart is W8A8Proj's
  exact path, which the dense launcher keeps behind METRALE_W8A8_MMA=exact (set for this module);
- against a float64 evaluation of docs/ops.md, within the docs/ops.md tolerances;
- bitwise row invariance of the whole routed-expert block (gate, up, SwiGLU, down with the combine,
  routed by a per-row router): a token alone vs in batches of 1..64 and 4096 tokens with random
  other tokens at random positions, 100%.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_proj_kernels import DEV, Layer, _inputs, _rel, _tolerance  # noqa: E402

from metrale_export.ops import cuda as mcuda  # noqa: E402,F401  (registers the CUDA kernels)
from metrale_export.ops.moe import combine as ref_combine  # noqa: E402

E, TOP_K = 8, 3


@pytest.fixture(autouse=True)
def dense_w8a8_exact(monkeypatch):
    """The dense W8A8 kernel of W8A8MoEProj version 2's arithmetic (the grouped launcher ignores it)."""
    monkeypatch.setenv("METRALE_W8A8_MMA", "exact")


CASES = [
    ("w4a16", dict(group_size=128, symmetric=True, bias=True), 200, 1152),
    ("w4a16", dict(group_size=32, symmetric=False, bias=False), 96, 256),
    ("w4a16", dict(group_size=128, symmetric=False, bias=False), 96, 800),  # a partial last group
    ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=True), 200, 1040),
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False), 256, 272),
    ("w8a8", dict(gran="channel", act="bf16", agran="row", bias=True), 200, 1040),
    ("w4a4", dict(act="nvfp4", input_scale=False, bias=True), 200, 1088),
    ("w4a4", dict(act="bf16", input_scale=False, bias=False), 136, 1024),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=False), 136, 1024),  # a static input_scale per expert
]
M_VALUES = (1, 2, 7, 16, 33, 129, 1000)


def _id(c):
    op, o, n, k = c
    return f"{op}-" + "-".join(f"{v}" for key, v in o.items() if key != "bias") + f"-n{n}-k{k}"


class Experts:
    """`experts` layers of one format (E unless told), stacked as the grouped op's tensors, routed top_k."""

    def __init__(self, case, seed=0, n=None, k=None, experts=E, top_k=TOP_K):
        op, o, n0, k0 = case
        self.op, self.o = op, o
        self.n, self.k = n or n0, k or k0
        self.e, self.top_k = experts, top_k
        self.layers = [Layer(op, o, self.n, self.k, seed + 101 * e) for e in range(experts)]
        self.t = {}
        for key in self.layers[0].gpu:
            vals = [layer.gpu[key] for layer in self.layers]
            if vals[0] is None:
                self.t[key] = None
            elif key == "weight_global_scale":
                self.t[key] = torch.cat([v.reshape(-1) for v in vals])
            else:
                self.t[key] = torch.stack(vals)
        b = [layer.bias_gpu for layer in self.layers]
        self.bias = None if b[0] is None else torch.stack(b)
        self.t["input_scale"] = None
        if o.get("input_scale"):
            # a different static activation scale per expert (some rows saturate: legal, and tested)
            for e, layer in enumerate(self.layers):
                layer.input_scale = torch.tensor([(2.0 + 0.75 * e) / 2688.0], dtype=torch.float32)
            self.t["input_scale"] = torch.cat([layer.input_scale for layer in self.layers]).to(DEV)

    def grouped(self, x, ids, w=None):
        o, t, n, k, E, TOP_K = self.o, self.t, self.n, self.k, self.e, self.top_k
        comb = int(w is not None)
        if self.op == "w4a16":
            return torch.ops.metrale.w4a16_moe_proj(x, ids, w, t["weight"], t["weight_scale"], t["zero_point"],
                                                    self.bias, n, k, E, TOP_K, comb, o["group_size"], "bf16",
                                                    "moe", "t")
        if self.op == "w8a8":
            return torch.ops.metrale.w8a8_moe_proj(x, ids, w, t["weight"], t["weight_scale"], None, self.bias, n, k, E,
                                                   TOP_K, comb, o["gran"], o["act"], o["agran"], "moe", "t")
        return torch.ops.metrale.w4a4_moe_proj(x, ids, w, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                               t["input_scale"], self.bias, n, k, E, TOP_K, comb, o["act"], "moe", "t")


def _routing(m, seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:TOP_K] for _ in range(m)]).to(torch.int32)
    w = torch.rand(m, TOP_K, generator=g) + 0.1
    return ids, w


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_each_expert_is_the_dense_kernel_bitwise_and_meets_float64(case):
    ex = Experts(case)
    fails = []
    for m in M_VALUES:
        for dtype in (torch.float32, torch.bfloat16):
            x = _inputs(m, ex.k, dtype, seed=m).to(DEV)
            ids, w = _routing(m, seed=m + 1)
            ids, w = ids.to(DEV), w.to(dtype).to(DEV)
            y = ex.grouped(x, ids)
            assert y.shape == (m, TOP_K, ex.n)
            dense = torch.full_like(y, float("nan"))
            for e in range(E):
                sel = ids == e
                if sel.any():
                    rows = x[:, None, :].expand(m, TOP_K, ex.k)[sel].contiguous()
                    dense[sel] = ex.layers[e].run(rows)
                    e64 = _rel(y[sel], ex.layers[e].float64_reference(rows.cpu()))
                    tol = _tolerance(ex.layers[e].fmt, dtype)
                    if e64 > tol:
                        fails.append(f"m={m} {dtype} expert {e}: vs float64 {e64:.3g} (tol {tol:g})")
            if not torch.equal(y, dense):
                fails.append(f"m={m} {dtype}: combine=0 differs from the dense kernel per expert")
            # combine=1 on one row per (row, slot): the dense outputs summed as docs/ops.md says
            xs = _inputs(m * TOP_K, ex.k, dtype, seed=m + 2).to(DEV).reshape(m, TOP_K, ex.k)
            yc = ex.grouped(xs, ids, w)
            per = torch.empty(m, TOP_K, ex.n, dtype=dtype, device=DEV)
            for e in range(E):
                sel = ids == e
                if sel.any():
                    per[sel] = ex.layers[e].run(xs[sel].contiguous())
            want = ref_combine(per.cpu(), ids.cpu(), w.cpu(), dtype).to(DEV)
            if not torch.equal(yc, want):
                fails.append(f"m={m} {dtype}: combine=1 differs from docs/ops.md's sum of the dense outputs")
    assert not fails, "\n".join(fails)


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[6], CASES[8]], ids=_id)
def test_moe_block_row_invariance_bitwise(case):
    """gate, up, SwiGLU, down + combine, routed per row: token 0's bits alone and in any batch."""
    op, o, _, _ = case
    h, i = 256, 128
    gate, up = Experts(case, seed=1, n=i, k=h), Experts(case, seed=2, n=i, k=h)
    down = Experts(case, seed=3, n=h, k=i)
    wr = torch.randn(E, h, generator=torch.Generator().manual_seed(9), dtype=torch.float64)

    def block(x):
        # the router per row in float64 on the host: a function of the row alone
        probs = torch.softmax(x.cpu().to(torch.float64) @ wr.T, dim=-1)
        top, ids = torch.sort(probs, dim=-1, descending=True, stable=True)
        ids, top = ids[:, :TOP_K].to(torch.int32).to(DEV), (top[:, :TOP_K] / top[:, :TOP_K].sum(-1, keepdim=True))
        act = torch.nn.functional.silu(gate.grouped(x, ids)) * up.grouped(x, ids)
        return down.grouped(act, ids, top.to(x.dtype).to(DEV))

    g = torch.Generator().manual_seed(5)
    token = _inputs(1, h, torch.bfloat16, seed=77).to(DEV)
    alone = block(token)
    bad = []
    for m in list(range(1, 65)) + [4096]:
        others = _inputs(m, h, torch.bfloat16, seed=1000 + m).to(DEV)
        pos = int(torch.randint(0, m, (1,), generator=g))
        others[pos] = token[0]
        y = block(others)
        if not torch.equal(y[pos], alone[0]):
            bad.append(m)
    assert not bad, f"token bits differ in batches of {bad}"


def test_bad_routing_is_skipped_not_read_out_of_bounds():
    """Ids outside [0, E) and repeated ids contribute nothing (docs/ops.md)."""
    ex = Experts(CASES[3])
    bad = torch.tensor([[0, 0, 99], [-1, 5, 5]], dtype=torch.int32)
    # m = 2: the slot path; m = 40: the sorted path (the bad rows first, valid routing after them)
    for m in (2, 40):
        x = _inputs(m, ex.k, torch.float32, seed=3).to(DEV)
        ids = (torch.cat([bad, _routing(m - 2, seed=4)[0]]) if m > 2 else bad).to(DEV)
        y = ex.grouped(x, ids)
        assert torch.equal(y[0, 0], ex.layers[0].run(x[:1])[0]), m
        assert (y[0, 1:] == 0).all() and (y[1, 0] == 0).all() and (y[1, 2] == 0).all(), m
        assert torch.equal(y[1, 1], ex.layers[5].run(x[1:2])[0]), m
        w = torch.rand(m, TOP_K, generator=torch.Generator().manual_seed(m)).to(DEV)
        yc = ex.grouped(x[:, None, :].expand(m, TOP_K, ex.k).contiguous(), ids, w)
        want0 = (ex.layers[0].run(x[:1])[0] * w[0, 0]).float()
        assert torch.equal(yc[0], want0), m  # one valid slot: +0 + y * w
