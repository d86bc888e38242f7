"""GPU tests of the grouped launchers' decode variants (``METRALE_MOE_DECODE``, plugins/moeProj/
moeProjKernel.cuh's moeDecodeVariant): a variant is a speed choice only, so its outputs must be the
default path's bit for bit.

The variants (VARIANTS): ``wide`` (combine=1's sum on moeCombineWideKernel: a CTA per row and 256
outputs, the row's slot outputs loaded 16 at a time before the products); ``pdl`` (wide, and the
kernels of each grouped op's launch sequence as programmatic dependents of each other: sm_90 only,
elsewhere it is wide); ``grid`` (wide, and the sorted path's streaming GEMM on a grid of the
resident CTAs walking the schedule's tiles, moeStreamGridKernel); ``all`` (the three); ``base``
(the kernels before the variants: the one-CTA-a-row combine, plain launches). The default (unset)
is ``auto``: wide, PDL on the slot path, the grid on the sorted path for W4A16 and W8A8. Each is
compared with the default on the same inputs: for W4A16 (with zero points and bias), W8A8 (per
channel and block-scaled FP8, and bf16 activations) and W4A4 (NVFP4 dynamic and with a static
input_scale per expert, and bf16 activations), at M = 1, 4, 16, 64 (the slot path and the sorted
path), uniform, Zipf-skewed (a hot expert takes most rows) and bad routing (repeated and
out-of-range ids, and a row with no valid slot), x in bfloat16, float16 and float32, top_k 8, 10
and 20 (one and two chunks of 16 slots), N not a multiple of 256: both ops of a layer (combine 0
and 1) equal the default's, into outputs that are not all zero; M = 100 and 200 (the 16-row
streaming tier and the shared-memory tier, which pdl launches plainly in the sequence); W4A16 also
under the fused decode path's variant 1 (``METRALE_MOE_FUSED=1``, whose combine is the same
launch; pdl does not apply to it). And the layer (gate_up, SwiGLU, down) captured into a CUDA graph
under each variant: its replays (on the captured inputs, and on new ones copied in) are the eager
default's bits.
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


VARIANTS = ("base", "wide", "pdl", "grid", "all")


def _compare(monkeypatch, ex, variants, label, m_values=M_VALUES, routings=ROUTINGS, dtypes=DTYPES):
    """Each variant against the default on the same inputs (the default computed once per input)."""
    fails = []
    for m in m_values:
        for kind in routings:
            for dtype in dtypes:
                call = _layer_ops(ex, m, kind, dtype, seed=97 * m + len(kind))
                _variant(monkeypatch, None)
                ref = call()
                where = f"{label} m={m} {kind} {dtype}"
                if not ref[1].abs().gt(0).any():
                    fails.append(f"{where}: the default combine=1 output is all zero (the comparison is vacuous)")
                for variant in variants:
                    _variant(monkeypatch, variant)
                    got = call()
                    torch.cuda.synchronize()
                    for comb in (0, 1):
                        if not torch.equal(_bits(ref[comb]), _bits(got[comb])):
                            bad = (_bits(ref[comb]) != _bits(got[comb])).nonzero()[:3].tolist()
                            fails.append(f"{where}: {variant} combine={comb} differs from the default at {bad}")
    _variant(monkeypatch, None)
    return fails


def _fmt_id(f):
    return f[0] + "-" + "-".join(str(v) for k, v in f[1].items() if k not in ("bias", "zero_point"))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"e{s[0]}-top{s[1]}-n{s[2]}-k{s[3]}")
@pytest.mark.parametrize("fmt", FORMATS, ids=_fmt_id)
def test_decode_variants_are_bitwise_the_default(monkeypatch, fmt, shape):
    e, top_k, n, k = shape
    ex = Experts(fmt[0], fmt[1], e, top_k, n, k, seed=n + top_k)
    fails = _compare(monkeypatch, ex, VARIANTS, f"{fmt[0]} {fmt[1]}")
    assert not fails, "\n".join(fails[:20])


@pytest.mark.parametrize("fmt", FORMATS, ids=_fmt_id)
def test_decode_variants_past_decode_m(monkeypatch, fmt):
    """M = 100 (16-row streaming tiles: moeStreamGridKernel<kXT = 2>) and 200 (the shared-memory tier,
    launched plainly between PDL kernels)."""
    ex = Experts(fmt[0], fmt[1], 64, 10, 1000, 512, seed=11)
    fails = _compare(monkeypatch, ex, VARIANTS, f"{fmt[0]} {fmt[1]}", m_values=(100, 200),
                     routings=("uniform", "bad"), dtypes=(torch.bfloat16, torch.float32))
    assert not fails, "\n".join(fails[:20])


def test_decode_variants_under_the_fused_decode_path(monkeypatch):
    """METRALE_MOE_FUSED=1 (W4A16): its combine=1 is the fused launch, then the same combine launch."""
    monkeypatch.setenv("METRALE_MOE_FUSED", "1")
    ex = Experts("w4a16", dict(zero_point=False, bias=True), 128, 8, 2048, 768, seed=5)
    fails = _compare(monkeypatch, ex, VARIANTS, "w4a16 fused=1")
    assert not fails, "\n".join(fails[:20])


def test_an_unknown_variant_is_the_default(monkeypatch):
    ex = Experts("w4a16", dict(zero_point=False, bias=False), 16, 4, 256, 256, seed=3)
    call = _layer_ops(ex, 3, "uniform", torch.bfloat16, seed=1)
    _variant(monkeypatch, None)
    ref = call()
    for name in ("no-such-variant", "wide,pdl", "PDL", ""):
        _variant(monkeypatch, name)
        got = call()
        assert torch.equal(_bits(ref[0]), _bits(got[0])) and torch.equal(_bits(ref[1]), _bits(got[1])), name


# The graph test's layer: Qwen3-30B-A3B's experts (H 2048, I 768, E 128, top-8), one format each.
GRAPH_FORMATS = [("w4a16", dict(zero_point=True, bias=False)),
                 ("w8a8", dict(gran="channel", act="fp8", agran="row", bias=False)),
                 ("w4a4", dict(act="nvfp4", input_scale=False, bias=False))]
_GRAPH_LAYERS: dict = {}


def _graph_layer(fmt):
    """(gate_up, down) Experts of one format, made once for the module."""
    key = _fmt_id(fmt)
    if key not in _GRAPH_LAYERS:
        _GRAPH_LAYERS[key] = (Experts(fmt[0], fmt[1], 128, 8, 2 * 768, 2048, seed=21),
                              Experts(fmt[0], fmt[1], 128, 8, 2048, 768, seed=22))
    return _GRAPH_LAYERS[key]


def _inputs(m, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    ids = _routing(m, 128, 8, "zipf" if seed % 2 else "uniform", seed)
    x = torch.randn(m, 2048, device=DEV, generator=g).to(torch.bfloat16)
    w = (torch.rand(m, 8, device=DEV, generator=g) + 0.1).to(torch.bfloat16)
    return x, ids, w


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("fmt", GRAPH_FORMATS, ids=_fmt_id)
def test_decode_variants_in_a_cuda_graph(monkeypatch, fmt, variant):
    """bench_moe_layer's grouped sequence (gate_up, silu(gate) * up, down with the combine) captured
    under the variant: each replay's output is the eager default's bits on the same inputs."""
    gate_up, down = _graph_layer(fmt)

    def layer(x, ids, w):
        gate, up = gate_up(x, ids).chunk(2, dim=-1)
        return down(torch.nn.functional.silu(gate) * up, ids, w)

    fails = []
    for m in M_VALUES:
        x, ids, w = _inputs(m, seed=m)
        x2, ids2, w2 = _inputs(m, seed=m + 1)
        _variant(monkeypatch, None)
        refs = [layer(x, ids, w), layer(x2, ids2, w2)]
        _variant(monkeypatch, variant)  # read at capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer(x, ids, w)  # warm up outside the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer(x, ids, w)
        _variant(monkeypatch, None)
        graph.replay()
        torch.cuda.synchronize()
        got = [out.clone()]
        x.copy_(x2)
        ids.copy_(ids2)
        w.copy_(w2)
        graph.replay()
        torch.cuda.synchronize()
        got.append(out.clone())
        del graph
        for i, (r, g) in enumerate(zip(refs, got)):
            if not r.abs().gt(0).any():
                fails.append(f"m={m} inputs {i}: the default output is all zero (vacuous)")
            if not torch.equal(_bits(r), _bits(g)):
                fails.append(f"m={m} inputs {i}: the {variant} graph replay differs from the eager default at "
                             f"{(_bits(r) != _bits(g)).nonzero()[:3].tolist()}")
    assert not fails, "\n".join(fails)
