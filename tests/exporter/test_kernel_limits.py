"""The CUDA kernels' K limit beyond the contract (contract.KERNEL_K_MULTIPLE, plugins/KERNELS.md,
Limits): W4A16Proj takes any even K in the contract and its CPU reference, but its CUDA kernel needs
K a multiple of 32. A held-out model with K=400 is refused at export (naming the projection and the
limit) and a graph holding such a node is refused by the plugin lowering's build, never only in the
engine; the qdq lowering, which runs no metrale kernel, still plans it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from metrale_export import contract
from metrale_export.cli.main import cli
from metrale_export.engines.nodes import OpInfo
from metrale_export.engines.plan import BuildOptions, Source, plan_build
from metrale_export.engines.policy import parse_policy
from metrale_export.engines.profiles import parse_profiles
from metrale_export.errors import InputError
from metrale_export.ops import w4a16

from support.held_out import write_qwen3

K = 400  # even (the contract's only condition), 400 = 16 mod 32


def test_the_limit_is_the_generated_headers():
    step = contract.KERNEL_K_MULTIPLE["w4a16"]
    header = (contract.JSON_PATH.parent / "include/metrale/contract.h").read_text()
    assert f"constexpr int32_t kW4A16_KERNEL_K_MULTIPLE{{{step}}};" in header
    kernel = (contract.JSON_PATH.parent / "w4a16Proj/w4a16ProjKernel.cuh").read_text()
    assert "k % contract::kW4A16_KERNEL_K_MULTIPLE != 0" in kernel
    assert not contract.kernel_k_check("w4a16", K).ok
    assert contract.kernel_k_check("w4a16", K + 16).ok
    assert contract.kernel_k_check("w8a8", K).ok  # no limit recorded for it


def test_the_cpu_reference_still_serves_k400():
    torch.manual_seed(0)
    q = w4a16.quantize(torch.randn(8, K), 128, symmetric=False)
    assert q.weight.shape == (8, K // 2) and q.weight_scale.shape == (8, 4)  # a partial last group
    assert w4a16.shape_check(K, 128).ok


def test_a_held_out_model_with_k400_is_refused_at_export(tmp_path):
    ckpt = write_qwen3(tmp_path / "qwen3-k400", layers=1, hidden=K)
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["export", str(ckpt), "-o", str(out), "--weight-quantization", "w4a16"],
                           catch_exceptions=False)
    assert r.exit_code == 2, r.output[-2000:]
    lines = [ln for ln in r.output.splitlines() if "W4A16Proj" in ln]
    assert len(lines) == 1, r.output[-2000:]
    assert "model.layers.0.self_attn.q_proj.weight" in lines[0]
    assert f"K={K} is not a multiple of 32" in lines[0]
    assert not (out / "model.onnx").exists()


def _plan(lowering, backend):
    ops = [OpInfo("layers.0.attn.q", "W4A16Proj", "attn", "bf16", 64, 384),
           OpInfo("layers.0.ffn.up", "W4A16Proj", "ffn", "bf16", 64, K)]
    source = Source(Path("/x/model.onnx"), None, [Path("/x/model.onnx")], ops, {"x": ["M", K]}, "s" * 64)
    options = BuildOptions(parse_profiles("1,2-8"), parse_policy("declared"), lowering=lowering,
                           plugins=Path("/lib.so") if lowering == "plugin" else None)
    return plan_build(source, Path("/out"), options, backend)


def test_the_plugin_build_refuses_a_node_the_kernel_cannot_serve():
    with pytest.raises(InputError) as e:
        _plan("plugin", ("tensorrt", "10.9"))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("node layers.0.ffn.up (W4A16Proj): K=400 is not a multiple of 32")
    assert "--lowering qdq" in msg
    assert _plan("qdq", ("tensorrt", "10.9")).lowering == "qdq"


def test_a_weight_with_three_faults_reports_all_three():
    """A group size outside the contract, an odd K, and a K the CUDA kernel does not serve."""
    from metrale_export.exporter.quantization import w4a16_check

    ok, reasons = w4a16_check(401, 48)
    assert not ok and len(reasons) == 3, reasons
    assert "group size must be one of" in reasons[0] and "is odd" in reasons[1]
    assert "not a multiple of 32" in reasons[2] and reasons[2].endswith("export it with another weight format")
    assert w4a16_check(K + 16, 128).ok
