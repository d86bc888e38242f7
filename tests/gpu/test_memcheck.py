"""compute-sanitizer memcheck over the kernel launchers (tests/gpu/memcheck_driver.cu).

The driver allocates every tensor at exactly its contract size and runs every op, format and tier
once; memcheck must report no error. Skipped where no GPU or no compute-sanitizer is present.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/local/cuda/bin") / name,) if p.exists()), None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_memcheck_clean(tmp_path):
    sanitizer, nvcc = _tool("compute-sanitizer"), _tool("nvcc")
    if sanitizer is None or nvcc is None:
        pytest.skip("compute-sanitizer and nvcc are needed")
    from metrale_export.ops import cuda as mcuda

    lib = mcuda.library_path()
    assert lib.is_file(), f"kernel library missing at {lib}: run 'make plugins'"
    exe = tmp_path / "memcheck_driver"
    subprocess.run([nvcc, "-std=c++17", "-O2", str(ROOT / "tests/gpu/memcheck_driver.cu"),
                    f"-I{ROOT / 'plugins/include'}", str(lib), f"-Xlinker=-rpath={lib.parent}",
                    "-o", str(exe)], check=True)
    proc = subprocess.run([sanitizer, "--tool", "memcheck", "--error-exitcode", "3", str(exe)],
                          capture_output=True, text=True, env=dict(os.environ))
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    assert "ERROR SUMMARY: 0 errors" in report, report
