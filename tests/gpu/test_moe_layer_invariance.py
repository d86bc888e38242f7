"""Bitwise row invariance of a whole routed-MoE layer through the CUDA ops, router included (issue 22).

The layer is benchmarks/bench_moe_layer.py's ``Layer``, the export's SparseMoE on its CUDA kernels:
the router gate (``metrale::float_proj``), ``metrale::router`` (softmax, top-k, renormalization),
the fused gate|up grouped op, the SwiGLU and the down grouped op with the combine. A token's output
alone must equal, bit for bit, its output in batches of 2..64 rows and beside 4096 other rows, at the
first, a middle and the last position, under uniform and Zipf-skewed routing (the router picks the
ids that ``router_input`` plants: a few hot experts take most rows of a skewed batch, and half of
the small batches route every row to the token's own experts). Those batches cross every path of
the grouped ops: the slot path, the sorted path and, past 128 rows, the wgmma tier (W4A16, W4A4),
and every tile size they choose, while the token's own expert tiles fill up with other rows.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

from benchmarks.bench_moe import routing  # noqa: E402
from benchmarks.bench_moe_layer import Layer, router_input  # noqa: E402
from metrale_export.ops import cuda as mcuda  # noqa: E402,F401  (registers the CUDA kernels)

H, INTER, E, TOP_K = 1024, 384, 64, 8
SMALL = (2, 3, 5, 8, 16, 17, 33, 64)  # batch rows beside the token's (slot and sorted paths)
LARGE = 4096                          # other rows of the prefill batch (the wgmma tier)


def _batch(rows: int, kind: str, seed: int, own: torch.Tensor | None = None) -> torch.Tensor:
    """``rows`` rows of router input: routed by bench_moe.routing (``kind``), or all to ``own``."""
    ids = own.expand(rows, TOP_K).contiguous() if own is not None else routing(rows, E, TOP_K, kind, seed)[0]
    return router_input(ids, H, torch.Generator(device="cuda").manual_seed(seed))


@pytest.mark.parametrize("kind", ["uniform", "zipf"])
@pytest.mark.parametrize("fmt", ["w4a16", "w8a8", "w4a4"])
def test_token_alone_equals_batched(fmt, kind):
    layer = Layer(fmt, H, INTER, E, TOP_K, seed=7)
    token = _batch(1, kind, seed=3)
    own, _ = layer.route(token)
    alone = layer.forward(token)
    assert torch.isfinite(alone.float()).all()
    fails = []
    for i, rows in enumerate(SMALL + (LARGE,)):
        others = _batch(rows, kind, seed=100 + rows, own=own if i % 2 and rows != LARGE else None)
        for pos in sorted({0, rows // 2, rows}):
            x = torch.cat([others[:pos], token, others[pos:]])
            y = layer.forward(x)
            if not torch.equal(y[pos:pos + 1], alone):
                diff = (y[pos:pos + 1].float() - alone.float()).abs().max().item()
                fails.append(f"{rows} others, position {pos}: max |diff| {diff:.3g}")
    assert not fails, f"{fmt} {kind}: the token's bits differ from its bits alone:\n" + "\n".join(fails)


def test_router_picks_the_planted_experts():
    """The probe's routing is the one intended: the router's ids are the planted ids (as sets), so the
    skewed batches really pile rows onto the hot experts."""
    layer = Layer("w4a16", H, INTER, E, TOP_K, seed=7)
    ids, _ = routing(LARGE, E, TOP_K, "zipf", 5)
    got, w = layer.route(router_input(ids, H, torch.Generator(device="cuda").manual_seed(5)))
    assert torch.equal(got.sort(dim=1).values, ids.sort(dim=1).values)
    assert torch.allclose(w.float().sum(dim=1), torch.ones(LARGE, device="cuda"), atol=1e-2)
    counts = torch.bincount(got.flatten().long(), minlength=E)
    assert counts.max().item() > 4 * LARGE * TOP_K / E  # a hot expert: over 4x the uniform share
