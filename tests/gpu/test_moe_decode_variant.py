"""GPU tests of the grouped launchers' decode variants (``METRALE_MOE_DECODE``, plugins/moeProj/
moeProjKernel.cuh's moeDecodeVariant): a variant is a speed choice only, so its outputs must be the
default path's bit for bit.

``wide`` (combine=1's sum on moeCombineWideKernel: a CTA per row and 256 outputs, the row's slot
outputs loaded 16 at a time before the products): for W4A16 (with zero points and bias), W8A8 (per
channel and block-scaled FP8, and bf16 activations) and W4A4 (NVFP4 dynamic and with a static
input_scale per expert, and bf16 activations), at M = 1, 4, 16, 64 (the slot path and the sorted
path), uniform, Zipf-skewed (a hot expert takes most rows) and bad routing (repeated and
out-of-range ids, and a row with no valid slot), x in bfloat16, float16 and float32, top_k 8, 10
and 20 (one and two chunks of 16 slots), N not a multiple of 256: both ops of a layer (combine 0
and 1) equal the default's, into outputs that are not all zero; W4A16 also under the fused decode
path's variant 1 (``METRALE_MOE_FUSED=1``, whose combine is the same launch).
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from metrale_export.ops import cuda as mcuda  # noqa: E402,F401  (registers the CUDA kernels)

DEV = "cuda"
M_VALUES = (1, 4, 16, 64)
ROUTINGS = ("uniform", "zipf", "bad")
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# (experts, top_k, n, k): Qwen3-30B-A3B's down_proj, a Qwen3-Next-like top-10 at an odd width, and
# top-20 (two chunks of the wide sum).
SHAPES = [(128, 8, 2048, 768), (64, 10, 1000, 512), (32, 20, 520, 256)]
FORMATS = [
    ("w4a16", dict(zero_point=True, bias=True)),
    ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=True)),
    ("w8a8", dict(gran="block128", act="fp8", agran="row_block128", bias=False)),
    ("w8a8", dict(gran="channel", act="bf16", agran="row", bias=False)),
    ("w4a4", dict(act="nvfp4", input_scale=False, bias=True)),
    ("w4a4", dict(act="nvfp4", input_scale=True, bias=False)),
    ("w4a4", dict(act="bf16", input_scale=False, bias=False)),
]


def _variant(monkeypatch, name):
    if name is None:
        monkeypatch.delenv("METRALE_MOE_DECODE", raising=False)
    else:
        monkeypatch.setenv("METRALE_MOE_DECODE", name)


class Experts:
    """E random experts of one format (random codes and scales: bitwise comparisons only)."""

    def __init__(self, fmt, o, e, top_k, n, k, seed):
        g = torch.Generator(device=DEV).manual_seed(seed)
        self.fmt, self.o, self.e, self.top_k, self.n, self.k = fmt, o, e, top_k, n, k

        def rbytes(*shape, lo=0, hi=256):
            return torch.randint(lo, hi, shape, device=DEV, generator=g, dtype=torch.int32).to(torch.uint8).view(torch.int8)

        self.bias = torch.randn(e, n, device=DEV, generator=g) if o.get("bias") else None
        if fmt == "w4a16":
            groups = (k + 127) // 128
            self.t = dict(weight=rbytes(e, n, k // 2),
                          weight_scale=(torch.rand(e, n, groups, device=DEV, generator=g) * 0.02 + 1e-3).to(torch.bfloat16),
                          zero_point=rbytes(e, n, groups, hi=16) if o["zero_point"] else None)
        elif fmt == "w8a8":
            codes = rbytes(e, n, k, hi=0x7E).view(torch.uint8) | (rbytes(e, n, k, hi=2).view(torch.uint8) << 7)
            shape = (e, n) if o["gran"] == "channel" else (e, (n + 127) // 128, (k + 127) // 128)
            self.t = dict(weight=codes.view(torch.int8), weight_scale=torch.rand(*shape, device=DEV, generator=g) * 0.01 + 1e-3)
        else:
            self.t = dict(weight=rbytes(e, n, k // 2), weight_scale=rbytes(e, n, k // 16, lo=0x28, hi=0x48),
                          weight_global_scale=torch.rand(e, device=DEV, generator=g) * 0.01 + 0.005,
                          input_scale=(torch.rand(e, device=DEV, generator=g) * 2 + 1) / 2688.0
                          if o["input_scale"] else None)

    def __call__(self, x, ids, w=None):
        t, o, n, k, e, top_k = self.t, self.o, self.n, self.k, self.e, self.top_k
        comb = int(w is not None)
        if self.fmt == "w4a16":
            return torch.ops.metrale.w4a16_moe_proj(x, ids, w, t["weight"], t["weight_scale"], t["zero_point"],
                                                    self.bias, n, k, e, top_k, comb, 128, "bf16", "moe", "t")
        if self.fmt == "w8a8":
            return torch.ops.metrale.w8a8_moe_proj(x, ids, w, t["weight"], t["weight_scale"], None, self.bias, n, k, e,
                                                   top_k, comb, o["gran"], o["act"], o["agran"], "moe", "t")
        return torch.ops.metrale.w4a4_moe_proj(x, ids, w, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                               t["input_scale"], self.bias, n, k, e, top_k, comb, o["act"], "moe", "t")


def _routing(m, e, top_k, kind, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "zipf":  # Zipf s = 1.2 over a random expert order: a few experts take most rows
        p = (1.0 / torch.arange(1, e + 1, dtype=torch.float64) ** 1.2)[torch.randperm(e, generator=g)]
    else:
        p = torch.ones(e, dtype=torch.float64)
    ids = torch.multinomial(p.expand(m, e).float(), top_k, replacement=False, generator=g).to(torch.int32)
    if kind == "bad":
        ids[0, 1] = ids[0, 0]     # a repeated id
        ids[0, top_k - 1] = e + 3  # out of range
        if m >= 2:
            ids[m - 1, :] = -1    # a row with no valid slot
    return ids.to(DEV)


def _layer_ops(ex, m, kind, dtype, seed):
    """(combine=0 output, combine=1 output) of one call pair, on one routing."""
    ids = _routing(m, ex.e, ex.top_k, kind, seed)
    g = torch.Generator(device=DEV).manual_seed(seed)
    x = torch.randn(m, ex.k, device=DEV, generator=g).to(dtype)
    xs = torch.randn(m, ex.top_k, ex.k, device=DEV, generator=g).to(dtype)
    w = (torch.rand(m, ex.top_k, device=DEV, generator=g) + 0.1).to(dtype)
    return lambda: (ex(x, ids), ex(xs, ids, w))


def _bits(t):
    """The output's bit patterns (NaN == NaN where the bits agree)."""
    return t.view(torch.int32) if t.dtype == torch.float32 else t.view(torch.int16)


def _compare(monkeypatch, ex, variant, label):
    fails = []
    for m in M_VALUES:
        for kind in ROUTINGS:
            for dtype in DTYPES:
                call = _layer_ops(ex, m, kind, dtype, seed=97 * m + len(kind))
                _variant(monkeypatch, None)
                ref = call()
                _variant(monkeypatch, variant)
                got = call()
                torch.cuda.synchronize()
                where = f"{label} m={m} {kind} {dtype}"
                if not ref[1].abs().gt(0).any():
                    fails.append(f"{where}: the default combine=1 output is all zero (the comparison is vacuous)")
                for comb in (0, 1):
                    if not torch.equal(_bits(ref[comb]), _bits(got[comb])):
                        bad = (_bits(ref[comb]) != _bits(got[comb])).nonzero()[:3].tolist()
                        fails.append(f"{where}: {variant} combine={comb} differs from the default at {bad}")
    _variant(monkeypatch, None)
    return fails


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"e{s[0]}-top{s[1]}-n{s[2]}-k{s[3]}")
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f[0] + "-" + "-".join(str(v) for k, v in f[1].items()
                                                                             if k not in ("bias", "zero_point")))
def test_wide_combine_is_bitwise_the_default(monkeypatch, fmt, shape):
    e, top_k, n, k = shape
    ex = Experts(fmt[0], fmt[1], e, top_k, n, k, seed=n + top_k)
    fails = _compare(monkeypatch, ex, "wide", f"{fmt[0]} {fmt[1]}")
    assert not fails, "\n".join(fails[:20])


def test_wide_combine_under_the_fused_decode_path(monkeypatch):
    """METRALE_MOE_FUSED=1 (W4A16): its combine=1 is the fused launch, then the same combine launch."""
    monkeypatch.setenv("METRALE_MOE_FUSED", "1")
    ex = Experts("w4a16", dict(zero_point=False, bias=True), 128, 8, 2048, 768, seed=5)
    fails = _compare(monkeypatch, ex, "wide", "w4a16 fused=1")
    assert not fails, "\n".join(fails[:20])


def test_an_unknown_variant_is_the_default(monkeypatch):
    ex = Experts("w4a16", dict(zero_point=False, bias=False), 16, 4, 256, 256, seed=3)
    call = _layer_ops(ex, 3, "uniform", torch.bfloat16, seed=1)
    _variant(monkeypatch, None)
    ref = call()
    _variant(monkeypatch, "no-such-variant")
    got = call()
    assert torch.equal(_bits(ref[0]), _bits(got[0])) and torch.equal(_bits(ref[1]), _bits(got[1]))
