"""The TensorRT plugin sources and the conformance harness compile against the public TensorRT
headers (g++ -fsyntax-only; no GPU, no TensorRT runtime).

The headers are not vendored: put them at third_party/TensorRT/include (git-ignored) or name a
directory in ``TensorRT_INCLUDE_DIR``. Without them, or without g++ or the CUDA runtime headers,
the test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
PLUGIN_SOURCES = sorted({*PLUGINS.glob("*/*Plugin.cpp"), *PLUGINS.glob("common/*.cpp")})
HARNESS = PLUGINS / "tests" / "conformance.cpp"


def _trt_include() -> Path | None:
    for candidate in (os.environ.get("TensorRT_INCLUDE_DIR"), REPO / "third_party" / "TensorRT" / "include"):
        if candidate and (Path(candidate) / "NvInferRuntime.h").exists():
            return Path(candidate)
    return None


def _cuda_include() -> Path | None:
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        homes.append(str(Path(nvcc).resolve().parents[1]))
    for home in homes:
        if home and (Path(home) / "include" / "cuda_runtime_api.h").exists():
            return Path(home) / "include"
    return None


def _compile(source: Path, trt: Path, cuda: Path) -> subprocess.CompletedProcess:
    cmd = ["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-deprecated-declarations",
           "-isystem", str(trt), "-isystem", str(cuda), "-I", str(PLUGINS / "include"), str(source)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _unity(tmp_path: Path) -> Path:
    """One translation unit including every plugin source: the TensorRT headers are parsed once."""
    unity = tmp_path / "plugins_unity.cpp"
    unity.write_text("".join(f'#include "{s}"\n' for s in PLUGIN_SOURCES))
    return unity


def test_plugin_sources_compile_against_tensorrt_headers(tmp_path):
    trt, cuda = _trt_include(), _cuda_include()
    if trt is None:
        pytest.skip("TensorRT headers not found: put NVIDIA/TensorRT's include/ at third_party/TensorRT/include "
                    "or set TensorRT_INCLUDE_DIR")
    if cuda is None:
        pytest.skip("CUDA runtime headers (cuda_runtime_api.h) not found: set CUDA_HOME")
    if shutil.which("g++") is None:
        pytest.skip("g++ not found")
    assert len(PLUGIN_SOURCES) >= 6, f"plugin sources missing: found {PLUGIN_SOURCES}"
    units = {"the plugin sources": _unity(tmp_path), "the conformance harness": HARNESS}
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = dict(zip(units, pool.map(lambda s: _compile(s, trt, cuda), units.values())))
    errors = [f"{what}:\n{p.stderr}" for what, p in procs.items() if p.returncode != 0]
    assert not errors, "\n".join(errors)
