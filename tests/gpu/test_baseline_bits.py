"""GPU test: the kernels built from this tree give bitwise the outputs of a baseline build of the
kernel library (an earlier commit's libmetrale_kernels.so, verified on the GPU), for every dense and
grouped projection case of test_proj_kernels / test_moe_kernels at M from 1 to 1000, both routings'
paths and the default variants of each launcher.

A speed change that must not change the arithmetic (a table lookup's addressing, a pipeline's depth,
a default launch variant) is checked here against the build that ran before it, in one process: the
baseline library is loaded with ctypes beside this tree's and swapped in as the library the torch ops
call (metrale_export.ops.cuda.library._lib), the same inputs run through both.

METRALE_BASELINE_LIB names the baseline's path; without it the test skips with the reason (the other
GPU tests do not need it). benchmarks/device_run.sh carries one where a call asks for it.
"""

from __future__ import annotations

import ctypes
import os

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

BASELINE = os.environ.get("METRALE_BASELINE_LIB", "")
if not BASELINE or not os.path.isfile(BASELINE):
    pytest.skip("METRALE_BASELINE_LIB does not name a baseline kernel library", allow_module_level=True)

from test_moe_kernels import CASES as MOE_CASES  # noqa: E402
from test_moe_kernels import TOP_K, Experts, _routing  # noqa: E402
from test_proj_kernels import CASES as DENSE_CASES  # noqa: E402
from test_proj_kernels import DEV, Layer, _case_id, _inputs  # noqa: E402

from metrale_export.ops.cuda import library  # noqa: E402

DENSE_M = (1, 3, 8, 13, 16, 17, 32, 64, 200, 1000)
MOE_M = (1, 4, 16, 64, 300)


_BASE: list = []


def _both(run):
    """run() through this tree's library, then through the baseline's: the two outputs."""
    mine = library.load_library()
    if not _BASE:
        _BASE.append(ctypes.CDLL(BASELINE))
        library._declare_projections(_BASE[0])
    base = _BASE[0]
    assert base is not mine
    out = [run()]
    library._lib = base
    try:
        out.append(run())
    finally:
        library._lib = mine
    return out


def _differs(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.contiguous().view(torch.int16) != b.contiguous().view(torch.int16)).sum().item())


@pytest.mark.parametrize("case", DENSE_CASES, ids=[_case_id(c) for c in DENSE_CASES])
def test_dense_bits_equal_the_baseline(case):
    op, o, n, k = case
    layer = Layer(op, o, n, k, seed=7)
    x = _inputs(max(DENSE_M), k, torch.bfloat16, seed=8).to(DEV)
    layer.set_input_scale(x.cpu())
    bad = []
    for m in DENSE_M:
        xm = x[:m].contiguous()
        mine, base = _both(lambda: layer.run(xm))
        if _differs(mine, base):
            bad.append(f"M={m}: {_differs(mine, base)} of {mine.numel()} elements differ from the baseline")
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("case", MOE_CASES, ids=[_case_id(c) for c in MOE_CASES])
def test_grouped_bits_equal_the_baseline(case):
    ex = Experts(case, seed=3)
    bad = []
    for m in MOE_M:
        ids, w = _routing(m, seed=m + 1)
        ids, w = ids.to(DEV), w.to(torch.bfloat16).to(DEV)
        # combine=0 on x's rows ([M, K], every slot of a row reads it); combine=1 on one row a slot
        # ([M, top_k, K], as a down projection), as test_moe_kernels runs them
        x = _inputs(m, ex.k, torch.bfloat16, seed=m).to(DEV)
        xs = _inputs(m * TOP_K, ex.k, torch.bfloat16, seed=m + 2).to(DEV).reshape(m, TOP_K, ex.k)
        for xin, comb in ((x, None), (xs, w)):
            mine, base = _both(lambda: ex.grouped(xin, ids, comb))
            torch.cuda.synchronize()
            if _differs(mine, base):
                bad.append(f"M={m} combine={comb is not None}: {_differs(mine, base)} elements differ")
    assert not bad, f"{_case_id(case)}:\n" + "\n".join(bad)
