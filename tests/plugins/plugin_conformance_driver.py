"""Driver of the plugin conformance harness (plugins/tests/conformance.cpp).

Writes seeded inputs and a manifest for every plugin case, runs the compiled harness on the built
``libmetrale_plugins.so``, then compares each output the plugin wrote with the torch CUDA op
(``metrale_export.ops.cuda``, through ``torch.ops.metrale.*``) bit for bit, checks row invariance
(the rows of M=m equal the first m rows of the largest M) and the float64-free CPU reference within
docs/ops.md's tolerance. Where the torch CUDA op is not importable it falls back to the kernel
launchers of ``libmetrale_kernels.so`` through ctypes (the dense projections only) and says so.
The non-projection ops (RMSNorm, Router, Attention, CausalConv1d, GatedDeltaRule) have their outputs,
row inputs and shapes from the contract (``contract.Output``, torch_ops.output_shape); their "rows"
are dimension 0 (a norm's rows, the router's, attention's and the GDN ops' batch of sequences), and
a case may run fewer rows than the default profiles.

Usable from pytest (tests/plugins/test_plugin_conformance.py) and as a script on a GPU machine:

    python tests/plugins/plugin_conformance_driver.py --build build/plugins-trt --out /tmp/conf

Invariants: inputs are made here once, from a fixed seed, and read by both sides; x holds the
largest row count and every smaller M uses its first rows; weights come from the project's own
quantizers, so every scale is a finite, contract-valid value.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from metrale_export import contract  # noqa: E402
from metrale_export.ops import attention as attention_ops  # noqa: E402
from metrale_export.ops import tolerances, torch_ops, w4a4, w4a16, w8a8  # noqa: E402,F401  (torch_ops registers the ops)

# The default engine profiles ("1,2-8,9-32,33-128,129-4096"); the harness runs both ends of each.
PROFILES = ((1, 1), (2, 8), (9, 32), (33, 128), (129, 4096))
ROWS = tuple(sorted({m for p in PROFILES for m in p}))
MAX_ROWS = max(ROWS)

_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i8": torch.int8, "i32": torch.int32}
# The grouped-expert ops' inputs whose dimension 0 is M (an input whose contract dtype is "x" has
# x's type: the manifest marks it likex).
_ROW_INPUTS = ("x", "topk_ids", "topk_weights")
_CODES = {v: k for k, v in _DTYPES.items()}


@dataclass
class Case:
    id: str
    op: str
    fields: dict  # attribute name -> int | float | str, in contract order
    inputs: list  # (name, tensor) in contract order, x first
    profiles: tuple = PROFILES
    row_inputs: tuple = _ROW_INPUTS  # the inputs whose dimension 0 is M (x is always one)

    @property
    def x(self) -> torch.Tensor:
        return self.inputs[0][1]

    def tensor(self, name: str) -> torch.Tensor | None:
        return next((t for n, t in self.inputs if n == name), None)

    @property
    def spec(self) -> contract.OpSpec:
        return contract.op(self.op)

    @property
    def grouped(self) -> bool:
        return self.spec.grouped_of is not None

    @property
    def row_counts(self) -> tuple[int, ...]:
        """Both ends of every profile: the M the harness runs."""
        return tuple(sorted({m for p in self.profiles for m in p}))

    @property
    def max_rows(self) -> int:
        return self.x.shape[0]

    def outputs(self, m: int) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
        """(name, dtype, shape) of each output present, for m rows."""
        f = self.fields
        if self.spec.is_projection or self.op == "FloatProj":
            if not self.grouped or f["combine"]:
                return [("y", self.x.dtype, (m, f["n"]))]
            return [("y", self.x.dtype, (m, f["top_k"], f["n"]))]
        x = self.x[:m]
        present = self.spec.present_outputs(f)
        return [(o.name, torch_ops.output_dtype(o, x), torch_ops.output_shape(self.spec, o, x, f))
                for o in self.spec.outputs if o.name in present]

    def y_shape(self, m: int) -> tuple[int, ...]:
        return self.outputs(m)[0][2]

    def rows(self, m: int) -> dict:
        """The row inputs (x, topk_ids, topk_weights; a norm's residual and gate; attention's key
        and value) cut to their first m rows."""
        return {name: t[:m] for i, (name, t) in enumerate(self.inputs) if i == 0 or name in self.row_inputs}


@dataclass
class Result:
    case: str
    op: str
    m: int
    bitwise: bool = False
    row_invariant: bool = False
    rel_err: float = float("nan")
    tolerance: float = float("nan")
    detail: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.bitwise and self.row_invariant and self.rel_err <= self.tolerance


def _x(gen: torch.Generator, k: int, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(MAX_ROWS, k, generator=gen) * 2.0
    # Awkward rows: an all-zero row (amax == 0 paths), a row of large values, a row with one spike.
    x[3] = 0.0
    x[5] *= 300.0
    x[7, 11] = 5000.0
    return x.to(dtype)


def make_cases(seed: int = 20261129) -> list[Case]:
    """The plugin cases: every op, each activation format, optional inputs, all x dtypes."""
    gen = torch.Generator().manual_seed(seed)
    cases: list[Case] = []

    def weight(n: int, k: int) -> torch.Tensor:
        return torch.randn(n, k, generator=gen) * 0.05

    def bias(n: int) -> torch.Tensor:
        return torch.randn(n, generator=gen).to(torch.float32)

    for cid, n, k, g, zp, has_bias, dt in (
        ("w4a16_g128_bf16", 256, 512, 128, False, False, "bf16"),
        ("w4a16_g64_zp_bias_f16", 200, 320, 64, True, True, "f16"),
        ("w4a16_g32_f32", 256, 512, 32, False, False, "f32"),
        ("w4a16_g128_partial_zp_bf16", 64, 160, 128, True, True, "bf16"),  # a partial last group (v2)
    ):
        q = w4a16.quantize(weight(n, k), group_size=g, symmetric=not zp)
        inputs = [("x", _x(gen, k, _DTYPES[dt])), ("weight", q.weight), ("weight_scale", q.weight_scale)]
        if zp:
            inputs.append(("zero_point", q.zero_point))
        if has_bias:
            inputs.append(("bias", bias(n)))
        fields = {"n": n, "k": k, "group_size": g, "has_zero_point": int(zp), "activation_format": "bf16",
                  "has_bias": int(has_bias), "family": "ffn", "name": f"layers.0.mlp.{cid}"}
        cases.append(Case(cid, "W4A16Proj", fields, inputs))

    for cid, n, k, wgran, act, agran, has_bias, dt in (
        ("w8a8_channel_fp8_row_bf16", 256, 512, "channel", "fp8", "row", False, "bf16"),
        ("w8a8_block128_fp8_rowblock_bias_f32", 200, 320, "block128", "fp8", "row_block128", True, "f32"),
        ("w8a8_channel_bf16act_f16", 256, 512, "channel", "bf16", "row", False, "f16"),
        # The static scale (version 2): 0.02 saturates the larger inputs (docs/ops.md).
        ("w8a8_channel_fp8_static_bias_bf16", 256, 512, "channel", "fp8", "tensor", True, "bf16"),
    ):
        q = w8a8.quantize(weight(n, k), granularity=wgran)
        inputs = [("x", _x(gen, k, _DTYPES[dt])), ("weight", q.weight), ("weight_scale", q.weight_scale)]
        if agran == "tensor":
            inputs.append(("input_scale", torch.tensor([0.02], dtype=torch.float32)))
        if has_bias:
            inputs.append(("bias", bias(n)))
        fields = {"n": n, "k": k, "weight_scale_granularity": wgran, "activation_format": act,
                  "activation_scale_granularity": agran, "has_bias": int(has_bias), "family": "attn",
                  "name": f"layers.0.self_attn.{cid}"}
        cases.append(Case(cid, "W8A8Proj", fields, inputs))

    for cid, n, k, act, has_input_scale, has_bias, dt in (
        ("w4a4_nvfp4_bf16", 256, 512, "nvfp4", False, False, "bf16"),
        ("w4a4_nvfp4_inputscale_bias_f16", 200, 320, "nvfp4", True, True, "f16"),
        ("w4a4_bf16act_f32", 256, 512, "bf16", False, False, "f32"),
    ):
        q = w4a4.quantize(weight(n, k))
        x = _x(gen, k, _DTYPES[dt])
        inputs = [("x", x), ("weight", q.weight), ("weight_scale", q.weight_scale),
                  ("weight_global_scale", q.weight_global_scale)]
        if has_input_scale:
            scale = (x.to(torch.float32)[8:].abs().amax() / 2688.0).reshape(1)
            inputs.append(("input_scale", scale.to(torch.float32)))
        if has_bias:
            inputs.append(("bias", bias(n)))
        fields = {"n": n, "k": k, "activation_format": act, "has_input_scale": int(has_input_scale),
                  "has_bias": int(has_bias), "family": "moe", "name": f"layers.0.mlp.experts.0.{cid}"}
        cases.append(Case(cid, "W4A4Proj", fields, inputs))
    for cid, n, k, has_bias, dt in (
        ("float_bf16", 256, 512, False, "bf16"),
        ("float_bias_f16", 200, 320, True, "f16"),
        ("float_f32", 256, 512, False, "f32"),
    ):
        inputs = [("x", _x(gen, k, _DTYPES[dt])), ("weight", weight(n, k).to(torch.bfloat16))]
        if has_bias:
            inputs.append(("bias", bias(n)))
        fields = {"n": n, "k": k, "has_bias": int(has_bias), "family": "head", "name": f"lm_head.{cid}"}
        cases.append(Case(cid, "FloatProj", fields, inputs))
    cases += _grouped_cases(gen, weight, bias)
    cases += _other_cases(gen)
    assert tuple(c.id for c in cases) == CASE_IDS
    _check_attribute_names(cases)
    return cases


def _routing(gen: torch.Generator, m: int, e: int, top_k: int) -> torch.Tensor:
    """Distinct expert ids per row, in random order (the contract allows any order)."""
    return torch.argsort(torch.rand(m, e, generator=gen), dim=1)[:, :top_k].to(torch.int32).contiguous()


def _grouped_cases(gen: torch.Generator, weight, bias) -> list[Case]:
    """The grouped-expert plugins: every weight format, both combine modes, optional inputs."""
    cases = []

    def stack(items):
        return torch.stack(items).contiguous()

    def routed(k, e, top_k, combine, dt):
        ids = _routing(gen, MAX_ROWS, e, top_k)
        if combine:
            x = (torch.randn(MAX_ROWS, top_k, k, generator=gen) * 2.0).to(_DTYPES[dt])
            w = torch.rand(MAX_ROWS, top_k, generator=gen).to(_DTYPES[dt])
            return x, ids, w
        return _x(gen, k, _DTYPES[dt]), ids, None

    def common(cid, n, k, e, top_k, combine):
        return {"n": n, "k": k, "num_experts": e, "top_k": top_k, "combine": combine}, \
            {"family": "moe", "name": f"layers.0.mlp.experts.{cid}"}

    for cid, n, k, e, top_k, combine, g, zp, has_bias, dt in (
        ("w4a16moe_g128_bf16", 256, 512, 8, 2, 0, 128, False, False, "bf16"),
        ("w4a16moe_g64_zp_bias_combine_f16", 200, 320, 6, 3, 1, 64, True, True, "f16"),
    ):
        qs = [w4a16.quantize(weight(n, k), group_size=g, symmetric=not zp) for _ in range(e)]
        x, ids, w = routed(k, e, top_k, combine, dt)
        inputs = [("x", x), ("topk_ids", ids), ("weight", stack([q.weight for q in qs])),
                  ("weight_scale", stack([q.weight_scale for q in qs]))]
        if zp:
            inputs.append(("zero_point", stack([q.zero_point for q in qs])))
        if has_bias:
            inputs.append(("bias", stack([bias(n) for _ in range(e)])))
        if combine:
            inputs.append(("topk_weights", w))
        head, tail = common(cid, n, k, e, top_k, combine)
        fields = {**head, "group_size": g, "has_zero_point": int(zp), "activation_format": "bf16",
                  "has_bias": int(has_bias), **tail}
        cases.append(Case(cid, "W4A16MoEProj", fields, inputs))

    for cid, n, k, e, top_k, combine, wgran, act, agran, has_bias, dt in (
        ("w8a8moe_channel_fp8_row_combine_bf16", 256, 512, 8, 2, 1, "channel", "fp8", "row", False, "bf16"),
        ("w8a8moe_block128_fp8_rowblock_bias_f32", 200, 320, 5, 2, 0, "block128", "fp8", "row_block128", True, "f32"),
    ):
        qs = [w8a8.quantize(weight(n, k), granularity=wgran) for _ in range(e)]
        x, ids, w = routed(k, e, top_k, combine, dt)
        inputs = [("x", x), ("topk_ids", ids), ("weight", stack([q.weight for q in qs])),
                  ("weight_scale", stack([q.weight_scale for q in qs]))]
        if has_bias:
            inputs.append(("bias", stack([bias(n) for _ in range(e)])))
        if combine:
            inputs.append(("topk_weights", w))
        head, tail = common(cid, n, k, e, top_k, combine)
        fields = {**head, "weight_scale_granularity": wgran, "activation_format": act,
                  "activation_scale_granularity": agran, "has_bias": int(has_bias), **tail}
        cases.append(Case(cid, "W8A8MoEProj", fields, inputs))

    for cid, n, k, e, top_k, combine, act, has_input_scale, has_bias, dt in (
        ("w4a4moe_nvfp4_combine_bf16", 256, 512, 8, 2, 1, "nvfp4", False, False, "bf16"),
        ("w4a4moe_nvfp4_inputscale_bias_f16", 200, 320, 6, 2, 0, "nvfp4", True, True, "f16"),
        ("w4a4moe_bf16act_f32", 256, 512, 4, 2, 0, "bf16", False, False, "f32"),
    ):
        qs = [w4a4.quantize(weight(n, k)) for _ in range(e)]
        x, ids, w = routed(k, e, top_k, combine, dt)
        inputs = [("x", x), ("topk_ids", ids), ("weight", stack([q.weight for q in qs])),
                  ("weight_scale", stack([q.weight_scale for q in qs])),
                  ("weight_global_scale", torch.cat([q.weight_global_scale.reshape(1) for q in qs]))]
        if has_input_scale:
            amax = x.to(torch.float32)[8:].abs().amax()
            scale = torch.stack([amax / 2688.0 * (1.0 + 0.25 * j) for j in range(e)])  # a scale per expert
            inputs.append(("input_scale", scale.to(torch.float32)))
        if has_bias:
            inputs.append(("bias", stack([bias(n) for _ in range(e)])))
        if combine:
            inputs.append(("topk_weights", w))
        head, tail = common(cid, n, k, e, top_k, combine)
        fields = {**head, "activation_format": act, "has_input_scale": int(has_input_scale),
                  "has_bias": int(has_bias), **tail}
        cases.append(Case(cid, "W4A4MoEProj", fields, inputs))
    return cases


# Attention's cases run a batch of at most 32 sequences: the rows are whole sequences.
_ATTENTION_PROFILES = ((1, 1), (2, 8), (9, 32))


def _f32(v: float) -> float:
    """v as the float32 an ONNX FLOAT attribute holds (the plugin gets that; so does the torch op)."""
    return torch.tensor(v, dtype=torch.float32).item()


def _other_cases(gen: torch.Generator) -> list[Case]:
    """The non-projection plugins: RMSNorm (residual, gate, (1 + w)), Router, Attention (decode and a
    prefill with a past, GQA), over all x dtypes."""
    cases = []
    for cid, k, offset, has_residual, has_gate, dt in (
        ("rmsnorm_bf16", 512, 0, False, False, "bf16"),
        ("rmsnorm_residual_f16", 320, 0, True, False, "f16"),
        ("rmsnorm_offset_gate_f32", 256, 1, False, True, "f32"),
        ("rmsnorm_residual_gate_bf16", 4096, 1, True, True, "bf16"),
    ):
        inputs = [("x", _x(gen, k, _DTYPES[dt])), ("weight", (torch.randn(k, generator=gen) * 0.1 + 1.0)
                                                   .to(_DTYPES[dt]))]
        if has_residual:
            inputs.append(("residual", _x(gen, k, _DTYPES[dt])))
        if has_gate:
            inputs.append(("gate", _x(gen, k, _DTYPES[dt])))
        fields = {"k": k, "epsilon": _f32(1e-6), "weight_offset": offset, "has_residual": int(has_residual),
                  "has_gate": int(has_gate), "family": "attn", "name": f"layers.0.input_layernorm.{cid}"}
        cases.append(Case(cid, "RMSNorm", fields, inputs, row_inputs=("residual", "gate")))
    for cid, e, top_k, normalize, dt in (
        ("router_e64_k8_norm_bf16", 64, 8, 1, "bf16"),
        ("router_e128_k2_f32", 128, 2, 0, "f32"),
        ("router_e8_k1_f16", 8, 1, 0, "f16"),
    ):
        logits = torch.randn(MAX_ROWS, e, generator=gen) * 3.0
        logits[9, :] = logits[9, 0]  # a row of ties: the lower expert id first
        logits = logits.to(_DTYPES[dt])
        fields = {"num_experts": e, "top_k": top_k, "normalize": normalize, "family": "moe",
                  "name": f"layers.0.mlp.gate.{cid}"}
        cases.append(Case(cid, "Router", fields, [("x", logits)], row_inputs=()))
    batch = max(m for p in _ATTENTION_PROFILES for m in p)
    for cid, hq, hkv, d, seq, total, dt in (
        ("attention_decode_gqa_bf16", 8, 2, 128, 1, 300, "bf16"),
        ("attention_prefill_past_f16", 4, 4, 64, 37, 600, "f16"),
        ("attention_decode_d256_f32", 4, 1, 256, 1, 70, "f32"),
    ):
        q = torch.randn(batch, hq, seq, d, generator=gen).to(_DTYPES[dt])
        key = torch.randn(batch, hkv, total, d, generator=gen).to(_DTYPES[dt])
        value = torch.randn(batch, hkv, total, d, generator=gen).to(_DTYPES[dt])
        fields = {"q_heads": hq, "kv_heads": hkv, "head_dim": d, "scale": _f32(d ** -0.5), "family": "attn",
                  "name": f"layers.0.self_attn.{cid}"}
        cases.append(Case(cid, "Attention", fields, [("x", q), ("key", key), ("value", value)],
                          profiles=_ATTENTION_PROFILES, row_inputs=("key", "value")))
    return cases + _gdn_cases(gen, batch)


def _gdn_cases(gen: torch.Generator, batch: int) -> list[Case]:
    """The Gated DeltaNet plugins: CausalConv1d (prefill, decode, a channel count that leaves a part
    of a CTA, every tap count's ends) and GatedDeltaRule (head_k_dim 64 and 128, GQA-like value
    heads, a prefill longer than the 32 tokens whose gates a warp computes at once, decode), over all
    x dtypes; their rows are whole sequences, as attention's."""
    cases = []
    for cid, c, k, seq, dt in (
        ("conv_k4_prefill_bf16", 384, 4, 37, "bf16"),
        ("conv_k4_decode_f16", 1100, 4, 1, "f16"),
        ("conv_k2_f32", 96, 2, 5, "f32"),
        ("conv_k8_bf16", 160, 8, 11, "bf16"),
    ):
        x = (torch.randn(batch, seq, c, generator=gen) * 2.0).to(_DTYPES[dt])
        weight = (torch.randn(c, 1, k, generator=gen) * 0.3).to(_DTYPES[dt])
        conv_state = torch.randn(batch, c, k - 1, generator=gen).to(_DTYPES[dt])
        fields = {"channels": c, "kernel_size": k, "family": "gdn", "name": f"layers.0.linear_attn.conv1d.{cid}"}
        cases.append(Case(cid, "CausalConv1d", fields, [("x", x), ("weight", weight), ("conv_state", conv_state)],
                          profiles=_ATTENTION_PROFILES, row_inputs=("conv_state",)))
    for cid, hk, hv, dk, dv, seq, dt in (
        ("rule_dk128_prefill_bf16", 2, 4, 128, 64, 40, "bf16"),
        ("rule_dk64_decode_f16", 1, 2, 64, 96, 1, "f16"),
        ("rule_dk64_f32", 2, 2, 64, 32, 7, "f32"),
    ):
        width = 2 * hk * dk + hv * dv
        x = torch.nn.functional.silu(torch.randn(batch, seq, width, generator=gen) * 1.5).to(_DTYPES[dt])
        ba = (torch.randn(batch, seq, 2 * hv, generator=gen) * 2.0).to(_DTYPES[dt])
        a_log = torch.randn(hv, generator=gen).to(_DTYPES[dt])
        dt_bias = torch.randn(hv, generator=gen).to(_DTYPES[dt])
        state = (torch.randn(batch, hv, dk, dv, generator=gen) * 0.5).to(torch.float32)
        fields = {"num_k_heads": hk, "num_v_heads": hv, "head_k_dim": dk, "head_v_dim": dv, "family": "gdn",
                  "name": f"layers.0.linear_attn.{cid}"}
        cases.append(Case(cid, "GatedDeltaRule", fields,
                          [("x", x), ("ba", ba), ("A_log", a_log), ("dt_bias", dt_bias), ("state", state)],
                          profiles=_ATTENTION_PROFILES, row_inputs=("ba", "state")))
    return cases


def _check_attribute_names(cases: list[Case]) -> None:
    """The fields given to the plugins are exactly the attributes the exporter writes."""
    try:
        from metrale_export.ops.onnx_translation import attribute_names
    except ImportError:  # onnx/onnxscript absent on this machine: nothing to cross-check against
        return
    for c in cases:
        expected = set(attribute_names(c.op))
        if set(c.fields) != expected:
            raise AssertionError(f"{c.id}: fields {sorted(c.fields)} differ from the exporter's {sorted(expected)}")


# The ids of make_cases(), spelled out so that collecting the tests does not build the inputs.
CASE_IDS = (
    "w4a16_g128_bf16", "w4a16_g64_zp_bias_f16", "w4a16_g32_f32", "w4a16_g128_partial_zp_bf16",
    "w8a8_channel_fp8_row_bf16", "w8a8_block128_fp8_rowblock_bias_f32", "w8a8_channel_bf16act_f16",
    "w8a8_channel_fp8_static_bias_bf16",
    "w4a4_nvfp4_bf16", "w4a4_nvfp4_inputscale_bias_f16", "w4a4_bf16act_f32",
    "float_bf16", "float_bias_f16", "float_f32",
    "w4a16moe_g128_bf16", "w4a16moe_g64_zp_bias_combine_f16",
    "w8a8moe_channel_fp8_row_combine_bf16", "w8a8moe_block128_fp8_rowblock_bias_f32",
    "w4a4moe_nvfp4_combine_bf16", "w4a4moe_nvfp4_inputscale_bias_f16", "w4a4moe_bf16act_f32",
    "rmsnorm_bf16", "rmsnorm_residual_f16", "rmsnorm_offset_gate_f32", "rmsnorm_residual_gate_bf16",
    "router_e64_k8_norm_bf16", "router_e128_k2_f32", "router_e8_k1_f16",
    "attention_decode_gqa_bf16", "attention_prefill_past_f16", "attention_decode_d256_f32",
    "conv_k4_prefill_bf16", "conv_k4_decode_f16", "conv_k2_f32", "conv_k8_bf16",
    "rule_dk128_prefill_bf16", "rule_dk64_decode_f16", "rule_dk64_f32",
)
# The cases whose rows are whole sequences (a batch of at most 32): attention's and the GDN ops'.
_SEQUENCE_CASES = ("attention", "conv_", "rule_")
# The (case, M) pairs the harness runs.
CASE_ROWS = tuple((cid, m) for cid in CASE_IDS
                  for m in (sorted({m for p in _ATTENTION_PROFILES for m in p}) if cid.startswith(_SEQUENCE_CASES)
                            else ROWS))


def _raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def write_manifest(cases: list[Case], directory: Path) -> Path:
    """Writes every input as raw bytes and the manifest the harness reads."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for c in cases:
        lines.append(f"case {c.id} {c.op}")
        for name, value in c.fields.items():
            kind = "int" if isinstance(value, int) else "float" if isinstance(value, float) else "str"
            lines.append(f"field {name} {kind} {value!r}" if kind == "float" else f"field {name} {kind} {value}")
        for i, (name, t) in enumerate(c.inputs):
            path = f"{c.id}.{name}.bin"
            (directory / path).write_bytes(_raw(t))
            dims = ",".join(str(d) for d in t.shape)
            like_x = i > 0 and c.spec.input(name).dtype == "x"  # the contract's dtype "x": x's type
            flags = (" rows" if i > 0 and name in c.row_inputs else "") + (" likex" if like_x else "")
            lines.append(f"input {name} {_CODES[t.dtype]} {dims} {path}{flags}")
        if c.grouped or not (c.spec.is_projection or c.op == "FloatProj"):
            for name, dtype, shape in c.outputs(c.max_rows):
                # An output of the contract's own type (the router's topk_ids, the rule's float32
                # state) names it, even when x has it too: the harness then holds it for every x.
                code = "" if c.spec.output(name).dtype == "x" else f" {_CODES[dtype]}"
                lines.append("output " + ",".join(str(d) for d in shape) + code)
        lines.append("profiles " + ",".join(f"{lo}-{hi}" for lo, hi in c.profiles))
        lines.append("end")
    manifest = directory / "manifest.txt"
    manifest.write_text("\n".join(lines) + "\n")
    return manifest


def run_harness(build: Path, manifest: Path, out: Path, gpu: bool = True) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(build / "metrale_conformance"), str(build / "libmetrale_plugins.so"), str(manifest), str(out)]
    if not gpu:
        cmd.append("--no-gpu")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


# --- references -------------------------------------------------------------------------------


def _torch_cuda_reference():
    """torch.ops.metrale.* with the CUDA implementation registered, or None (and why)."""
    try:
        from metrale_export.ops import cuda  # registers the CUDA kernels
    except Exception as e:  # absent or broken on this machine
        return None, f"metrale_export.ops.cuda not importable: {e}"
    return f"torch.ops.metrale (metrale_export.ops.cuda, kernels from {cuda.library_path()})", ""


def _call_op(c: Case, x: torch.Tensor, device: str, rows: dict | None = None) -> torch.Tensor:
    """The torch op of the case on x (CPU reference or CUDA op, by device); ``rows``: the row
    inputs after x (the grouped ops' topk_ids, topk_weights; a norm's residual, gate; attention's
    key, value) cut to x's rows. An op of several outputs gives a tuple."""
    f = c.fields
    if c.op not in ("W4A16Proj", "W8A8Proj", "W4A4Proj"):
        # The torch op's arguments as the contract orders them (x, torch_inputs, torch_attributes).
        spec = contract.op(c.op)
        t = {name: v for name, v in c.inputs[1:]} | (rows or {})
        args = [t.get(name) for name in spec.torch_inputs]
        args = [None if a is None else a.to(device) for a in args]
        return getattr(torch.ops.metrale, spec.torch_name)(x.to(device), *args,
                                                           *(f[a] for a in spec.torch_attributes))
    t = {name: (v.to(device) if v is not None else None) for name, v in c.inputs[1:]}
    x = x.to(device)
    if c.op == "W4A16Proj":
        return torch.ops.metrale.w4a16_proj(x, t["weight"], t["weight_scale"], t.get("zero_point"), t.get("bias"),
                                            f["n"], f["k"], f["group_size"], f["activation_format"], f["family"],
                                            f["name"])
    if c.op == "W8A8Proj":
        return torch.ops.metrale.w8a8_proj(x, t["weight"], t["weight_scale"], t.get("input_scale"), t.get("bias"),
                                           f["n"], f["k"],
                                           f["weight_scale_granularity"], f["activation_format"],
                                           f["activation_scale_granularity"], f["family"], f["name"])
    return torch.ops.metrale.w4a4_proj(x, t["weight"], t["weight_scale"], t["weight_global_scale"],
                                       t.get("input_scale"), t.get("bias"), f["n"], f["k"], f["activation_format"],
                                       f["family"], f["name"])


class _Launchers:
    """The C launchers of libmetrale_kernels.so through ctypes (the fallback reference)."""

    _ACT = {"bf16": 0, "fp8": 1, "nvfp4": 2}
    _WSCALE = {"channel": 0, "block128": 1}
    _ASCALE = {"row": 0, "row_block128": 1, "tensor": 2}
    _XDT = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        vp, i32, i64, sz = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_size_t
        L = self.lib
        L.metrale_w4a16_workspace_size.argtypes = [i64, i64, i64, i64]
        L.metrale_w4a16_workspace_size.restype = sz
        L.metrale_w4a16_proj.argtypes = [vp, i32, vp, vp, vp, vp, vp, i64, i64, i64, i64, vp, sz, vp]
        L.metrale_w8a8_workspace_size.argtypes = [i64, i64, i64, i32, i32]
        L.metrale_w8a8_workspace_size.restype = sz
        L.metrale_w8a8_proj.argtypes = [vp, i32, vp, vp, i32, i32, i32, vp, vp, vp, i64, i64, i64, vp, sz, vp]
        L.metrale_w4a4_workspace_size.argtypes = [i64, i64, i64, i32]
        L.metrale_w4a4_workspace_size.restype = sz
        L.metrale_w4a4_proj.argtypes = [vp, i32, vp, vp, vp, vp, i32, vp, vp, i64, i64, i64, vp, sz, vp]
        for fn in (L.metrale_w4a16_proj, L.metrale_w8a8_proj, L.metrale_w4a4_proj):
            fn.restype = ctypes.c_int

    def __call__(self, c: Case, x: torch.Tensor) -> torch.Tensor:
        f = c.fields
        t = {name: v.cuda().contiguous() for name, v in c.inputs[1:]}
        x = x.cuda().contiguous()
        m, n, k = x.shape[0], f["n"], f["k"]
        y = torch.empty(m, n, dtype=x.dtype, device="cuda")
        p = lambda name: t[name].data_ptr() if name in t else None  # noqa: E731
        stream = torch.cuda.current_stream().cuda_stream
        act = self._ACT[f["activation_format"]]
        if c.op == "W4A16Proj":
            ws = self.lib.metrale_w4a16_workspace_size(m, n, k, f["group_size"])
            w = torch.empty(max(ws, 1), dtype=torch.uint8, device="cuda")
            rc = self.lib.metrale_w4a16_proj(x.data_ptr(), self._XDT[x.dtype], p("weight"), p("weight_scale"),
                                             p("zero_point"), p("bias"), y.data_ptr(), m, n, k, f["group_size"],
                                             w.data_ptr(), ws, stream)
        elif c.op == "W8A8Proj":
            agran = self._ASCALE[f["activation_scale_granularity"]]
            ws = self.lib.metrale_w8a8_workspace_size(m, n, k, act, agran)
            w = torch.empty(max(ws, 1), dtype=torch.uint8, device="cuda")
            rc = self.lib.metrale_w8a8_proj(x.data_ptr(), self._XDT[x.dtype], p("weight"), p("weight_scale"),
                                            self._WSCALE[f["weight_scale_granularity"]], act, agran,
                                            p("input_scale"), p("bias"),
                                            y.data_ptr(), m, n, k, w.data_ptr(), ws, stream)
        else:
            ws = self.lib.metrale_w4a4_workspace_size(m, n, k, act)
            w = torch.empty(max(ws, 1), dtype=torch.uint8, device="cuda")
            rc = self.lib.metrale_w4a4_proj(x.data_ptr(), self._XDT[x.dtype], p("weight"), p("weight_scale"),
                                            p("weight_global_scale"), p("input_scale"), act, p("bias"), y.data_ptr(),
                                            m, n, k, w.data_ptr(), ws, stream)
        torch.cuda.synchronize()
        if rc != 0:
            raise RuntimeError(f"{c.id}: launcher returned cudaError {rc} for M={m}")
        return y


def _rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    y64, r64 = y.to(torch.float64), ref.to(torch.float64)
    denom = torch.linalg.norm(r64).item()
    return torch.linalg.norm(y64 - r64).item() / (denom if denom > 0 else 1.0)


def _output_path(out: Path, c: Case, m: int, o: int) -> Path:
    """Where the harness writes output o at m rows (plugins/tests/conformance.cpp)."""
    return out / f"{c.id}.m{m}{'' if o == 0 else f'.out{o}'}.bin"


def _read_outputs(out: Path, c: Case, m: int) -> list[torch.Tensor] | None:
    tensors = []
    for o, (_, dtype, shape) in enumerate(c.outputs(m)):
        path = _output_path(out, c, m, o)
        if not path.exists():
            return None
        tensors.append(torch.frombuffer(bytearray(path.read_bytes()), dtype=dtype).reshape(shape))
    return tensors


def _as_list(result) -> list[torch.Tensor]:
    return [t.cpu() for t in (result if isinstance(result, (tuple, list)) else (result,))]


def _tolerance(c: Case, dtype: torch.dtype) -> float:
    """docs/ops.md, Tolerances: relative Frobenius error against the CPU reference, per output dtype
    (and activation format, projections); the non-projection kernels' GPU bounds (attention: its
    operands rounded to bf16)."""
    if c.spec.is_projection or c.op == "FloatProj":
        # The plugins' kernels may sum fp8 products on the FP8 tensor core (W8A8Proj version 3).
        return tolerances.op_output_bound(dtype, c.fields.get("activation_format", c.spec.default_activation),
                                          tensor_core=True)
    bound = tolerances.OP_NON_PROJECTION_GPU[str(dtype).rsplit(".", 1)[-1]]
    return max(bound, attention_ops.ATTENTION_BOUND) if c.op == "Attention" else bound


def compare(cases: list[Case], out: Path, build: Path) -> tuple[list[Result], str]:
    """Compares every output the harness wrote; returns the results and the name of the reference used."""
    ref_name, why = _torch_cuda_reference()
    launchers = None
    if ref_name is None:
        launchers = _Launchers(build / "libmetrale_kernels.so")
        ref_name = f"ctypes launchers of {build / 'libmetrale_kernels.so'} ({why})"
    results = []
    for c in cases:
        largest = _read_outputs(out, c, c.max_rows)
        for m in c.row_counts:
            r = Result(c.id, c.op, m)
            ys = _read_outputs(out, c, m)
            if ys is None:
                r.detail = f"the harness wrote not every output of {c.id} at M={m}"
                results.append(r)
                continue
            x = c.x[:m]
            rows = {k: v for k, v in c.rows(m).items() if k != "x"}
            if launchers and c.op not in ("W4A16Proj", "W8A8Proj", "W4A4Proj"):
                r.detail = f"{c.op} needs the torch CUDA op as the reference"
                results.append(r)
                continue
            refs = [launchers(c, x)] if launchers else _as_list(_call_op(c, x, "cuda", rows))
            cpus = _as_list(_call_op(c, x, "cpu", rows))
            r.bitwise, r.row_invariant, r.rel_err, r.tolerance = True, largest is not None, 0.0, 0.0
            details = []
            for (name, dtype, _), y, ref, cpu, big in zip(c.outputs(m), ys, refs, cpus, largest or ys):
                same = _raw(y) == _raw(ref)
                r.bitwise = r.bitwise and same
                if not same:
                    diff = (y.to(torch.float64) - ref.to(torch.float64)).abs()
                    details.append(f"{name}: {int((_raw_view(y) != _raw_view(ref)).sum())} of {y.numel()} elements "
                                   f"differ, max |diff| {diff.max().item():.3g}")
                r.row_invariant = r.row_invariant and _raw(y) == _raw(big[:m])
                if dtype.is_floating_point:  # the router's ids: bitwise against the CUDA op only
                    r.rel_err = max(r.rel_err, _rel_err(y, cpu))
                    r.tolerance = max(r.tolerance, _tolerance(c, dtype))
            r.detail = "; ".join(details)
            results.append(r)
    return results, ref_name


def _raw_view(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def table(results: list[Result]) -> str:
    lines = [f"{'case':40s} {'M':>5s}  bitwise  row-inv  rel-err(cpu ref)  tol"]
    for r in results:
        lines.append(f"{r.case:40s} {r.m:5d}  {str(r.bitwise):7s}  {str(r.row_invariant):7s}  "
                     f"{r.rel_err:16.3e}  {r.tolerance:.0e} {'' if r.ok else 'FAIL ' + r.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", type=Path, default=REPO / "build" / "plugins-trt")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--no-gpu", action="store_true", help="run only the harness's CPU checks")
    args = ap.parse_args(argv)
    cases = make_cases()
    manifest = write_manifest(cases, args.out / "inputs")
    proc = run_harness(args.build, manifest, args.out / "outputs", gpu=not args.no_gpu)
    (args.out / "harness.log").write_text(proc.stdout + proc.stderr)
    print(proc.stdout[-20000:], proc.stderr[-4000:], sep="\n")
    if args.no_gpu:
        return proc.returncode
    results, ref_name = compare(cases, args.out / "outputs", args.build)
    report = f"reference: {ref_name}\n" + table(results)
    (args.out / "comparison.txt").write_text(report + "\n")
    (args.out / "comparison.json").write_text(json.dumps([r.__dict__ | {"ok": r.ok} for r in results], indent=1))
    print(report)
    ok = proc.returncode == 0 and all(r.ok for r in results)
    print("CONFORMANCE", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
