"""The instruction equivalence the wgmma tier rests on (tests/gpu/wgmma_equiv.cu).

The kernels' own wgmma path (WgmmaRS on the wgOperandOffset layout through wgDescB, plugins/common/
projWgmma.cuh) and their mma.sync path (mma16816) must give the same float32 bits for the contract's
k order, random C, bf16 and f16, at both token tiles; both within 1e-5 of float64. Needs an sm_90
GPU and nvcc.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((str(p) for p in (Path("/usr/local/cuda/bin/nvcc"),) if p.exists()), None)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="needs an sm_90 GPU (wgmma)")
def test_wgmma_and_mma_sync_bits_are_identical(tmp_path):
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc is needed")
    exe = tmp_path / "wgmma_equiv"
    subprocess.run([nvcc, "-std=c++17", "-O2", "-fmad=false", "--expt-relaxed-constexpr",
                    "-gencode=arch=compute_90a,code=sm_90a", str(ROOT / "tests/gpu/wgmma_equiv.cu"),
                    f"-I{ROOT / 'plugins/include'}", f"-I{ROOT / 'plugins/common'}", "-o", str(exe)], check=True)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    report = proc.stdout + proc.stderr
    print(report)
    assert proc.returncode == 0, report
    assert "RESULT: bit-identical" in report, report
