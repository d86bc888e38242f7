"""Where GatedDeltaRule's CUDA kernel and its CPU reference (ops/gdn.py) part (a diagnostic, GPU).

The kernel's float32 state differs from the reference in about 1% of its elements by a few ulps
(benchmarks/results/gdn-20261202-1131-3c726bf.md). The SASS of the float32 kernel shows its state
arithmetic as separate FMUL and FADD (the FFMAs are inside the correctly rounded division and square
root sequences; tests/gpu builds with -fmad=false), so the candidates left are the gates (beta and
gamma: exp and log1p in float64 on both sides, libdevice on the GPU, torch's CPU kernels here) and
the l2 norm. This runs the rule on the same float32 inputs with the gates made exact on both sides
(A_log = -inf gives gamma = exp(-0) = 1; b = 100 gives beta = 1 / (1 + 3.7e-44) = 1), one gate at a
time, and compares the gates themselves computed by torch in float64 on the CPU and on the GPU.

    python -m benchmarks.diagnostics.gdn_state_ulps [OUT_DIR]

Prints a markdown table (and writes OUT_DIR/gdn_ulps.md): for each shape and variant, the state
and output elements that differ and the (sequence, value head) slices they fall in.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from metrale_export.ops import cuda as _cuda  # noqa: F401  (registers the CUDA kernels)
from metrale_export.ops import gdn as G

SHAPES = {"next80b": (16, 32, 128, 128), "demo": (2, 4, 64, 64)}
B, S = 3, 9


def _inputs(shape, seed):
    hk, hv, dk, dv = SHAPES[shape]
    g = torch.Generator().manual_seed(seed)
    x = torch.nn.functional.silu(torch.randn(B, S, 2 * hk * dk + hv * dv, generator=g))
    ba = torch.randn(B, S, 2 * hv, generator=g) * 2
    a_log, dt_bias = torch.randn(hv, generator=g), torch.randn(hv, generator=g)
    st = torch.randn(B, hv, dk, dv, generator=g) * 0.5
    return x, ba, a_log, dt_bias, st


def _variant(name, x, ba, a_log, dt_bias, st, hv):
    ba, a_log, st = ba.clone(), a_log.clone(), st.clone()
    if name in ("gamma = 1", "beta = gamma = 1", "beta = gamma = 1, state 0, S = 1"):
        a_log[:] = float("-inf")
    if name in ("beta = 1", "beta = gamma = 1", "beta = gamma = 1, state 0, S = 1"):
        ba[..., :hv] = 100.0
    if name.endswith("S = 1"):
        x, ba, st = x[:, :1], ba[:, :1], torch.zeros_like(st)
    return x, ba, a_log, dt_bias, st


def _diff(a, b):
    return (a.contiguous().view(torch.int32) != b.contiguous().view(torch.int32))


def main(argv: list[str]) -> int:
    lines = ["| shape | variant | state elements differing | (seq, head) slices with a difference | "
             "y elements differing | max |diff| state |", "|---|---|---|---|---|---|"]
    gate_lines = ["| shape | beta differing (float32, CPU vs GPU torch float64) | gamma differing |",
                  "|---|---|---|"]
    for shape, (hk, hv, dk, dv) in SHAPES.items():
        base = _inputs(shape, 7)
        for name in ("as in the tests", "gamma = 1", "beta = 1", "beta = gamma = 1",
                     "beta = gamma = 1, state 0, S = 1"):
            x, ba, a_log, dt_bias, st = _variant(name, *base, hv)
            y_cpu, s_cpu = G.gated_delta_rule(x, ba, a_log, dt_bias, st, hk, hv, dk, dv)
            y_gpu, s_gpu = torch.ops.metrale.gated_delta_rule(x.cuda(), ba.cuda(), a_log.cuda(), dt_bias.cuda(),
                                                              st.cuda(), hk, hv, dk, dv, "gdn", "diag")
            d = _diff(s_gpu.cpu(), s_cpu)
            slices = int(d.flatten(2).any(-1).sum())
            dy = _diff(y_gpu.cpu(), y_cpu)
            lines.append(f"| {shape} | {name} | {int(d.sum())} of {d.numel()} | {slices} of {B * hv} | "
                         f"{int(dy.sum())} of {dy.numel()} | "
                         f"{(s_gpu.cpu().double() - s_cpu.double()).abs().max().item():.2e} |")
        x, ba, a_log, dt_bias, st = base
        beta_c, gamma_c = G.gate_inputs(ba, a_log, dt_bias, hv)
        beta_g, gamma_g = G.gate_inputs(ba.cuda(), a_log.cuda(), dt_bias.cuda(), hv)
        gate_lines.append(f"| {shape} | {int(_diff(beta_g.cpu(), beta_c).sum())} of {beta_c.numel()} | "
                          f"{int(_diff(gamma_g.cpu(), gamma_c).sum())} of {gamma_c.numel()} |")
    text = "\n".join(["GatedDeltaRule, float32 x, B = 3, S = 9: CUDA kernel vs CPU reference", "", *lines, "",
                      "The gates by ops/gdn.gate_inputs in torch on the CPU vs on the GPU (float64 exp/log1p):",
                      "", *gate_lines, ""])
    print(text)
    if argv:
        Path(argv[0]).mkdir(parents=True, exist_ok=True)
        (Path(argv[0]) / "gdn_ulps.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
