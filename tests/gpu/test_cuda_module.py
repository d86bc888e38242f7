"""The CUDA op module on any machine (no GPU needed): it imports, finds its library through
$METRALE_KERNELS_LIB, and a missing library is a clear error at call time, never at import."""

from __future__ import annotations

import pytest
import torch

from metrale_export.ops import cuda as mcuda


def test_library_path_env_override(monkeypatch, tmp_path):
    monkeypatch.setenv("METRALE_KERNELS_LIB", str(tmp_path / "libx.so"))
    assert mcuda.library_path() == tmp_path / "libx.so"
    monkeypatch.delenv("METRALE_KERNELS_LIB")
    assert mcuda.library_path().parts[-3:] == ("build", "plugins", "libmetrale_kernels.so")


def test_missing_library_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(mcuda.library, "_lib", None)
    monkeypatch.setenv("METRALE_KERNELS_LIB", str(tmp_path / "missing.so"))
    with pytest.raises(mcuda.KernelLibraryError, match="make plugins"):
        mcuda.load_library()
    assert not mcuda.available()


def test_cpu_tensors_still_run_the_reference():
    # Registering the CUDA kernels leaves the CPU implementation in place.
    from metrale_export.ops import w4a16

    w = torch.randn(16, 64)
    q = w4a16.quantize(w, 32)
    x = torch.randn(3, 64)
    y = torch.ops.metrale.w4a16_proj(x, q.weight, q.weight_scale, None, None, 16, 64, 32, "bf16", "ffn", "t")
    assert y.shape == (3, 16) and y.dtype == torch.float32
