"""The row-invariance report: the same decode rows fed alone and inside batches must give bitwise
identical outputs.

Runs on the PyTorch model (on the GPU through the CUDA ops, whose arithmetic is the plugins'; on the
CPU through the reference ops). Each of N sequences has its own KV cache of the same length; every
batch size b runs the first b sequences together, and row i of every output is compared bit for bit
with sequence i run alone. Invariants: torch only (no Polygraphy or ONNX imports), so it runs
wherever the model runs; a difference is reported, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class InvarianceRow:
    output: str
    batch: int
    identical_rows: int
    rows: int
    max_abs_diff: float

    @property
    def ok(self) -> bool:
        return self.identical_rows == self.rows


def decode_inputs(model, sequences: int, past: int, seed: int, device) -> list[tuple]:
    """One (input_ids, position_ids, *past) tuple per sequence, batch 1, seq 1."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(sequences):
        ids = torch.randint(0, model.cfg.vocab_size, (1, 1), generator=g)
        pos = torch.full((1, 1), past)
        # Every layer's state (KV cache, GDN conv and recurrent state), random, in its own dtype.
        state = []
        for _, spec in model.state_specs():
            like = spec.example(1, past, model.dtype, "cpu")
            state.append((torch.randn(like.shape, generator=g) * 0.5).to(like.dtype))
        out.append(tuple(t.to(device) for t in (ids, pos, *state)))
    return out


@torch.no_grad()
def row_invariance(model, batch_sizes: list[int], past: int = 5, seed: int = 0) -> list[InvarianceRow]:
    device = next(model.buffers()).device
    n = max(batch_sizes)
    seqs = decode_inputs(model, n, past, seed, device)
    names = model.output_names()
    alone = [model(*s) for s in seqs]
    rows = []
    for b in sorted(set(batch_sizes)):
        batched = model(*(torch.cat([s[j] for s in seqs[:b]], dim=0) for j in range(len(seqs[0]))))
        for name, out in zip(names, batched):
            same, worst = 0, 0.0
            for i in range(b):
                ref = alone[i][names.index(name)][0]
                got = out[i]
                # Bitwise: compare the bytes, so -0 vs +0 and NaN payloads count as differences.
                if torch.equal(got.contiguous().view(torch.int8), ref.contiguous().view(torch.int8)):
                    same += 1
                worst = max(worst, float((got.float() - ref.float()).abs().max()))
            rows.append(InvarianceRow(name, b, same, b, worst))
    return rows
