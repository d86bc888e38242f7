"""The main job (``metrale-export MODEL``) on the hybrid (Qwen3-Next) and Qwen3-MoE demos: export,
compare and engines with TensorRT-RTX, in every weight format; and its engine options.

The end-to-end runs are ``slow`` (an export, a comparison and two engine builds each: 1-5 minutes
on two cores); the choices they rest on are tested fast (tests/engines/test_profiles.py places the
GDN states, ``test_moe_experts_follow_the_lowering`` below).
"""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from metrale_export.cli.main import cli
from metrale_export.engines import backends
from metrale_export.engines.plan import BuildOptions
from metrale_export.engines.policy import parse_policy
from metrale_export.engines.profiles import parse_profiles
from metrale_export.exporter.export import ExportOptions
from metrale_export.exporter.quantization import QuantRequest
from metrale_export.pipeline import JobOptions, job_conflicts, moe_experts_check, moe_experts_for

needs_rtx = pytest.mark.skipif(backends.available()["tensorrt-rtx"] is None,
                               reason=f"the TensorRT-RTX wheels do not import: {backends.INSTALL['tensorrt-rtx']}")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _job(plugins=None, engines=True, default=True, asked="grouped"):
    build = BuildOptions(parse_profiles("1"), parse_policy("declared"), plugins=plugins)
    return JobOptions(ExportOptions(request=QuantRequest(weight="w4a16", moe_experts=asked)), build,
                      engines=engines, moe_experts_default=default)


def test_moe_experts_follow_the_lowering():
    assert moe_experts_for(_job())[0] == "dense"  # qdq cannot lower the grouped-expert ops
    assert "qdq lowering" in moe_experts_for(_job())[1]
    assert moe_experts_for(_job(plugins=Path("lib.so"))) == ("grouped", "")
    assert moe_experts_for(_job(engines=False)) == ("grouped", "")
    assert moe_experts_for(_job(default=False)) == ("grouped", "")  # the user's choice stands


def test_the_job_reports_every_conflict_at_once():
    """Grouped experts without --plugins and an RTX target too old for W4A4's FP8 block scales: both."""
    build = BuildOptions(parse_profiles("1"), parse_policy("declared"), backend="tensorrt-rtx", rtx_targets=((8, 6),))
    job = JobOptions(ExportOptions(request=QuantRequest(weight="w4a4", moe_experts="grouped")), build,
                     moe_experts_default=False)
    refused = {hint: c for hint, c in job_conflicts(job, "qwen3_moe", "w4a4").items() if not c.ok}
    assert list(refused) == ["--moe-experts", "--rtx-target"]
    assert "grouped-expert ops" in refused["--moe-experts"].message
    assert "--rtx-target 8.6" in refused["--rtx-target"].message


@needs_rtx
def test_grouped_experts_without_plugins_are_refused_before_the_export():
    """Asked for by name, grouped experts would export and verify, then fail in the qdq build."""
    assert "--plugins" in moe_experts_check(_job(default=False), "qwen3_moe").message
    assert moe_experts_check(_job(default=False), "qwen3").ok  # no experts to keep
    assert moe_experts_check(_job(default=False, plugins=Path("lib.so")), "qwen3_next").ok
    assert moe_experts_check(_job(default=False, engines=False), "qwen3_moe").ok
    assert moe_experts_check(_job(default=False, asked="dense"), "qwen3_moe").ok
    assert moe_experts_check(_job(), "qwen3_moe").ok  # the default: the job picks dense


@needs_rtx
def test_main_job_with_grouped_experts_and_qdq_engines_exits_2_before_tracing(demos, tmp_path):
    out = tmp_path / "job"
    r = run(demos / "moe", "-o", out, "--moe-experts", "grouped", "--profiles", "1", "--max-context", "64")
    assert r.exit_code == 2, r.output
    assert "--moe-experts" in r.output and "--skip-engines" in r.output
    assert "tracing" not in r.output and not out.exists()


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    base = tmp_path_factory.mktemp("demos")
    for kind, flag in (("hybrid", "--hybrid"), ("moe", "--moe")):
        assert run("demo-model", base / kind, flag).exit_code == 0
    return base


@pytest.mark.slow
@needs_rtx
@pytest.mark.parametrize("kind", ["hybrid", "moe"])
@pytest.mark.parametrize("weights", ["w4a16", "w8a8", "w4a4"])
def test_main_job_builds_engines_for_hybrid_and_moe(demos, tmp_path, kind, weights):
    out = tmp_path / "job"
    # SM 12.0: TensorRT-RTX compiles FP8 weights for SM 8.9 and later only.
    r = run(demos / kind, "-o", out, "--weight-quantization", weights, "--profiles", "1,2-8",
            "--max-context", "256", "--backend", "tensorrt-rtx", "--rtx-target", "12.0", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output[r.output.index("{\n"):])
    assert summary["steps"]["compare"]["ok"] is True
    engines = summary["steps"]["engines"]
    assert engines["count"] == 2 and engines["max_context"] == 256
    assert engines["build_time"]["estimated"] == 2 and engines["build_time"]["expected_seconds"] > 0  # issue 24.9
    assert engines["backend"]["targets"] == ["12.0"]
    manifest = json.loads((out / "engines" / "manifest.json").read_text())
    assert [e["label"] for e in manifest["engines"]] == ["1", "2-8"]
    inputs = manifest["engines"][1]["optimization_profiles"][0]["shapes"]
    if kind == "hybrid":  # the GDN states take the profile's batch
        assert inputs["conv_state.0"]["max"][0] == 8 and inputs["recurrent_state.0"]["min"][0] == 2
        assert manifest["size"]["fixed_state_bytes"] > 0
    assert summary["steps"]["export"]["moe_experts"] == "dense"
    converted = manifest["engines"][0]["bf16_float_weights"]
    # the lm_head is a FloatProj: its qdq expansion's weight (lm_head/w_N) is what goes to bf16
    assert "model.embed_tokens.weight" in converted and any(n.startswith("lm_head") for n in converted)
    for e in manifest["engines"]:
        assert (out / "engines" / e["file"]).stat().st_size == e["bytes"] > e["weights"]["bytes"]
