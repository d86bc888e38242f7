"""GPU tests of the streaming tile's load variants (METRALE_STREAM, plugins/common/projStream.cuh):
``xpf`` (the activation fragments of each block loaded one block ahead instead of at the block's
start), ``l2`` (the weight codes prefetched into the L2 four blocks ahead; in the sorted path's grid
kernel, the next item's code rows before each item) and ``xl2`` (both). Speed choices only: every
output must be the default's bit for bit.

Dense: W4A16 on test_stream_ring's shapes (1..8 slices, partial last CTAs, zero points, groups of
32..128, K not a multiple of 128), W4A4 (NVFP4 and bf16 activations) and W8A8 with bf16 activations
(the streaming tier's other users), at every M = 1..16 (both activation tiles), outputs
NaN-poisoned. Grouped experts: M = 1 and 4 (the slot path, moeSlotKernel) and 16 and 64 (the sorted
path: under auto the grid kernel for W4A16 / W8A8, under base moeStreamKernel) in every grouped
format, combine 0 and 1, on uniform and bad routing.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from test_moe_decode_variant import FORMATS as MOE_FORMATS  # noqa: E402
from test_moe_decode_variant import Experts, _bits, _fmt_id, _layer_ops  # noqa: E402
from test_proj_kernels import DEV, Layer, _inputs  # noqa: E402
from test_stream_ring import CASES as W4A16_CASES  # noqa: E402

ENV = "METRALE_STREAM"
VARIANTS = ("xpf", "l2", "xl2")
DENSE = ([("w4a16", o, n, k) for o, n, k in W4A16_CASES]
         + [("w4a4", dict(act="nvfp4", bias=True), 4104, 2048), ("w4a4", dict(act="bf16", bias=False), 300, 1056),
            ("w4a4", dict(act="nvfp4", bias=False), 4096, 12288),
            ("w8a8", dict(gran="channel", act="bf16", agran="row", bias=True), 520, 2048)])


def _dense_id(c):
    op, o, n, k = c
    return op + "-" + "-".join(f"{v}" for key, v in o.items() if key != "bias") + f"-n{n}-k{k}"


def _run(monkeypatch, variant, call):
    if variant is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, variant)
    out = call()
    torch.cuda.synchronize()
    monkeypatch.delenv(ENV, raising=False)
    return out


@pytest.mark.parametrize("case", DENSE, ids=[_dense_id(c) for c in DENSE])
def test_dense_variants_give_the_default_bits(case, monkeypatch):
    op, o, n, k = case
    layer = Layer(op, o, n, k, seed=31)
    x = _inputs(16, k, torch.bfloat16, seed=37).to(DEV)
    bad = []
    for m in range(1, 17):
        xm = x[:m].contiguous()
        ref = _run(monkeypatch, None, lambda: layer.run(xm))
        if ref.isnan().any():
            bad.append(f"m={m}: the default left outputs unwritten")
        for variant in VARIANTS:
            got = _run(monkeypatch, variant, lambda: layer.run(xm))
            a, b = ref.view(torch.int16), got.view(torch.int16)
            if not torch.equal(a, b):
                bad.append(f"m={m}: {(a != b).sum().item()} elements differ between {variant} and the default")
    assert not bad, f"{_dense_id(case)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("fmt", MOE_FORMATS, ids=_fmt_id)
@pytest.mark.parametrize("decode", [None, "base"], ids=["auto", "base"])
def test_grouped_paths_give_the_default_bits(fmt, decode, monkeypatch):
    """The grouped ops under each variant (auto: PDL slot launches, the sorted grid kernel; base: plain
    launches, moeStreamKernel) equal the default, both ops."""
    if decode is not None:
        monkeypatch.setenv("METRALE_MOE_DECODE", decode)
    ex = Experts(fmt[0], fmt[1], 128, 8, 2048, 768, seed=41)
    fails = []
    for m in (1, 4, 16, 64):
        for kind in ("uniform", "bad"):
            call = _layer_ops(ex, m, kind, torch.bfloat16, seed=7 * m + len(kind))
            ref = _run(monkeypatch, None, call)
            if not ref[1].abs().gt(0).any():
                fails.append(f"m={m} {kind}: the default combine=1 output is all zero")
            for variant in VARIANTS:
                got = _run(monkeypatch, variant, call)
                for comb in (0, 1):
                    if not torch.equal(_bits(ref[comb]), _bits(got[comb])):
                        fails.append(f"m={m} {kind} combine={comb}: {variant} differs from the default")
    assert not fails, "\n".join(fails)
