"""GPU conformance of the TensorRT plugins: the compiled harness on the built library, then each
plugin's outputs compared bit for bit with the torch CUDA op, per plugin and per row count (both
ends of every default profile; attention: of its batch profiles).

Needs a CUDA GPU and a build with TensorRT headers (``cmake -S plugins -B build/plugins-trt
-DTensorRT_INCLUDE_DIR=...``; ``METRALE_PLUGIN_BUILD`` names another build directory). Skipped, with
the reason, otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import plugin_conformance_driver as driver

pytestmark = pytest.mark.gpu

BUILD = Path(os.environ.get("METRALE_PLUGIN_BUILD", driver.REPO / "build" / "plugins-trt"))


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    for name in ("libmetrale_plugins.so", "metrale_conformance", "libmetrale_kernels.so"):
        if not (BUILD / name).exists():
            pytest.skip(f"{BUILD / name} is missing: build with cmake -S plugins -B {BUILD} "
                        "-DTensorRT_INCLUDE_DIR=<TensorRT include dir> && cmake --build " f"{BUILD}")
    out = tmp_path_factory.mktemp("plugin-conformance")
    cases = driver.make_cases()
    manifest = driver.write_manifest(cases, out / "inputs")
    proc = driver.run_harness(BUILD, manifest, out / "outputs")
    results, reference = driver.compare(cases, out / "outputs", BUILD)
    report = f"reference: {reference}\n" + driver.table(results)
    print(report)
    # METRALE_CONFORMANCE_OUT keeps the harness log and the comparison (e.g. for a remote GPU run).
    keep = os.environ.get("METRALE_CONFORMANCE_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "harness.log").write_text(proc.stdout + proc.stderr)
        (Path(keep) / "comparison.txt").write_text(report + "\n")
    return proc, {(r.case, r.m): r for r in results}


def test_harness_checks_pass(conformance):
    proc, _ = conformance
    failed = [line for line in proc.stdout.splitlines() if line.startswith("FAIL")]
    assert proc.returncode == 0, "harness failures:\n" + "\n".join(failed) + "\n" + proc.stderr[-2000:]


@pytest.mark.parametrize(("case", "m"), driver.CASE_ROWS)
def test_plugin_matches_torch_cuda_op(conformance, case, m):
    _, results = conformance
    r = results[(case, m)]
    assert r.bitwise, f"{case} M={m}: the plugin's y differs from the torch CUDA op: {r.detail}"
    assert r.row_invariant, f"{case} M={m}: rows differ from the same rows at the case's largest M"
    assert r.rel_err <= r.tolerance, f"{case} M={m}: relative error {r.rel_err:.3e} vs CPU reference > {r.tolerance}"
