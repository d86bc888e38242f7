"""The row-invariance report: the same decode rows fed alone and inside batches must give bitwise
identical outputs; and its two companions, a sequence prefilled in one chunk or in chunks (down to
one token a step, i.e. decode) and the same call run twice.

Runs on the PyTorch model (on the GPU through the CUDA ops, whose arithmetic is the plugins'; on the
CPU through the reference ops). ``row_invariance``: each of N sequences has its own state (KV cache,
GDN states) of the same length; every batch size b runs the first b sequences together, and row i of
every output is compared bit for bit with sequence i run alone. ``chunk_invariance``: one sequence
from an empty state, its logits token by token and its final states compared with the one-chunk
prefill's. ``run_to_run``: every output of the same call twice. Invariants: torch only (no
Polygraphy or ONNX imports), so it runs wherever the model runs; a difference is reported, never an
exception; "identical" means the same bytes (-0 vs +0 and NaN payloads count as differences).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class BitwiseCount:
    """How many of the ``total`` pieces of ``output`` compared have the reference's bytes, and the
    largest absolute difference; ``ok`` when every one has."""

    output: str
    identical: int
    total: int
    max_abs_diff: float

    @property
    def ok(self) -> bool:
        return self.identical == self.total


@dataclass
class InvarianceRow(BitwiseCount):
    """One output at one batch size: the pieces are the batch's rows, each against its row run alone."""

    batch: int


def same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality: the same shape, dtype and bytes."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.int8), b.contiguous().view(torch.int8))


def decode_inputs(model, sequences: int, past: int, seed: int, device, seq: int = 1) -> list[tuple]:
    """One (input_ids, position_ids, *past) tuple per sequence, batch 1, ``seq`` tokens (1: decode)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(sequences):
        ids = torch.randint(0, model.cfg.vocab_size, (1, seq), generator=g)
        pos = torch.arange(past, past + seq)[None]
        # Every layer's state (KV cache, GDN conv and recurrent state), random, in its own dtype.
        state = []
        for _, spec in model.state_specs():
            like = spec.example(1, past, model.dtype, "cpu")
            state.append((torch.randn(like.shape, generator=g) * 0.5).to(like.dtype))
        out.append(tuple(t.to(device) for t in (ids, pos, *state)))
    return out


@torch.no_grad()
def row_invariance(model, batch_sizes: list[int], past: int = 5, seed: int = 0, seq: int = 1) -> list[InvarianceRow]:
    """Per batch size and output: how many of the batch's rows are bitwise the row run alone."""
    device = next(model.buffers()).device
    n = max(batch_sizes)
    seqs = decode_inputs(model, n, past, seed, device, seq)
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
                if same_bytes(got, ref):
                    same += 1
                worst = max(worst, float((got.float() - ref.float()).abs().max()))
            rows.append(InvarianceRow(name, identical=same, total=b, max_abs_diff=worst, batch=b))
    return rows


@dataclass
class ChunkRow(BitwiseCount):
    """One output of a sequence prefilled in chunks of ``chunk`` tokens against the one-chunk prefill:
    ``logits`` counts tokens, a state counts the whole tensor (1 or 0 of 1)."""

    chunk: int


@torch.no_grad()
def run_chunked(model, ids: torch.Tensor, chunk: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Sequence ``ids`` [1, T] from an empty state (no past; zero GDN states), ``chunk`` tokens a
    call, each call's states fed to the next: (logits [1, T, V], the final states)."""
    device = ids.device
    states = [spec.example(1, 0, model.dtype, device) for _, spec in model.state_specs()]
    logits = []
    for start in range(0, ids.shape[1], chunk):
        piece = ids[:, start:start + chunk]
        pos = torch.arange(start, start + piece.shape[1], device=device)[None]
        out = model(piece, pos, *states)
        logits.append(out[0])
        states = list(out[1:1 + len(states)])
    return torch.cat(logits, dim=1), states


@torch.no_grad()
def chunk_invariance(model, tokens: int, chunks: list[int], seed: int = 0) -> list[ChunkRow]:
    """One random sequence of ``tokens`` tokens prefilled in chunks of each size in ``chunks`` (1:
    decode token by token) against the one-chunk prefill: its logits per token and every final
    state (``present_key.i`` .. ; the KV cache holds every token's keys and values)."""
    device = next(model.buffers()).device
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.cfg.vocab_size, (1, tokens), generator=g).to(device)
    ref_logits, ref_states = run_chunked(model, ids, tokens)
    names = model.output_names()[1:1 + len(ref_states)]
    rows = []
    for chunk in chunks:
        logits, states = run_chunked(model, ids, chunk)
        same = sum(same_bytes(logits[0, t], ref_logits[0, t]) for t in range(tokens))
        rows.append(ChunkRow("logits", same, tokens, float((logits.float() - ref_logits.float()).abs().max()),
                             chunk=chunk))
        for name, got, ref in zip(names, states, ref_states):
            rows.append(ChunkRow(name, int(same_bytes(got, ref)), 1, float((got.float() - ref.float()).abs().max()),
                                 chunk=chunk))
    return rows


@torch.no_grad()
def run_to_run(fn, repeats: int = 2) -> list[tuple[int, bool]]:
    """``fn()`` (a tuple of tensors) ``repeats`` times: (output index, bitwise identical in every
    repeat) for each output."""
    first = [t.clone() for t in fn()]
    ok = [True] * len(first)
    for _ in range(repeats - 1):
        for i, t in enumerate(fn()):
            ok[i] = ok[i] and same_bytes(t, first[i])
    return list(enumerate(ok))
