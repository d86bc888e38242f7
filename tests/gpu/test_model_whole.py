"""GPU tests of the whole model through the CUDA ops (issue 19): a sequence's logits and states
(KV cache, GDN conv and recurrent states) are bitwise the same
- alone and inside a batch of up to 64 sequences, in decode and in prefill (every model);
- prefilled in one chunk and in chunks of 64, 7 and 1 tokens (1: decode token by token), every
  model (the hybrid's Gated DeltaNet conv and recurrence are metrale ops in the recurrent form, so
  chunking changes none of their bits);
- run to run;
and the forward executes no order-sensitive torch reduction outside NOT_COVERED (now empty: every
norm, attention, projection, lm_head, router and GDN conv and recurrence is a metrale op). The demo, MoE demo and hybrid demo
models in every weight format, and the Qwen3 with 8B-like layers (benchmarks/model_check.QWEN3_8B_LIKE,
written from a seed) in W4A16. The full sweep (batches 1..64, every format of the 8B-like model) is
benchmarks/model_check.py; these are its smaller cut. Skipped where no CUDA device is present.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU (tests/gpu)", allow_module_level=True)

import metrale_export.ops.cuda  # noqa: E402,F401  (registers the CUDA kernels)
from benchmarks import model_check as mc  # noqa: E402
from metrale_export.compare.row_invariance import (  # noqa: E402
    chunk_invariance, decode_inputs, row_invariance, run_to_run)

CASES = [(m, f) for m in mc.MODELS for f in mc.FORMATS] + [(mc.BIG, "w4a16")]


@pytest.fixture(scope="module", params=CASES, ids=[f"{m}-{f}" for m, f in CASES])
def model(request, tmp_path_factory):
    name, fmt = request.param
    root = tmp_path_factory.getbasetemp() / "whole-models"
    ckpt = mc.write_big(root) if name == mc.BIG else mc.demo_checkpoint(root, name)
    # The 8B-like model rounds to nearest, as model_check's whole section does (the scale search
    # takes minutes on a CPU at these sizes; the check is of the kernels' invariance).
    m = mc.build_model(ckpt, fmt, "cuda", scale_search=name != mc.BIG)
    m.case_name = name
    yield m
    del m
    torch.cuda.empty_cache()


def _failing(rows):
    return [f"{r.output} @ batch {r.batch}: {r.identical}/{r.total}" for r in rows if not r.ok]


def test_rows_alone_equal_batched(model):
    bad = _failing(row_invariance(model, [1, 2, 7, 33, 64], past=mc.DECODE_PAST, seed=1))
    bad += _failing(row_invariance(model, [1, 5, 64], past=mc.PREFILL_PAST, seed=2, seq=mc.PREFILL_SEQ))
    assert not bad, "outputs differ alone vs batched: " + "; ".join(bad[:6])


def test_chunked_prefill_and_decode_equal_one_chunk(model):
    rows = chunk_invariance(model, mc.CHUNK_TOKENS, list(mc.CHUNKS), seed=3)
    bad = [f"chunks of {r.chunk}: {r.output} {r.identical}/{r.total}" for r in rows if not r.ok]
    assert not bad, "chunked prefill differs from one chunk: " + "; ".join(bad[:6])


def test_run_to_run(model):
    seqs = decode_inputs(model, 64, mc.DECODE_PAST, 1, "cuda")
    batch = [torch.cat([s[j] for s in seqs], dim=0) for j in range(len(seqs[0]))]
    bad = [model.output_names()[i] for i, ok in run_to_run(lambda: model(*batch), repeats=3) if not ok]
    assert not bad, f"outputs differ run to run: {bad}"


def test_no_torch_reduction_outside_the_metrale_ops(model):
    seqs = decode_inputs(model, 2, mc.PREFILL_PAST, 2, "cuda", seq=mc.PREFILL_SEQ)
    found, metrale = mc.torch_reductions(model, [torch.cat([s[j] for s in seqs]) for j in range(len(seqs[0]))])
    left = {k: v for k, v in found.items() if k[0] in mc.ORDER_SENSITIVE and not k[1].startswith(mc.NOT_COVERED)}
    assert not left, f"torch reductions outside the metrale ops: {left}"
    assert metrale.get("attention") and metrale.get("rms_norm"), f"the metrale ops did not run: {metrale}"
